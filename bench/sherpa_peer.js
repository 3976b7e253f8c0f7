// bench/sherpa_peer.js — sherpa-onnx (npm sherpa-onnx-node, installed by
// tools/sherpa/build.sh) on a model exported by tools/sherpa/export_onnx.py,
// for bench/sherpa_vs_hark.sh. Run with NODE_PATH=<cache>/node/node_modules.
//
//   node sherpa_peer.js MODEL_DIR tokens WAV...
//     each file alone, whole, then TAIL_MS of silence and inputFinished;
//     one JSON line per file: {file, tokens: [token text, ...]}
//   node sherpa_peer.js MODEL_DIR run N SECONDS WAV...
//     N live streams, each fed the files in turn (stream i starting at file
//     i % files, offset i * STAGGER_MS / N ms) in 100 ms pieces at real time for
//     SECONDS; a 10 ms loop (as sherpa's own WebSocket server) feeds what is
//     due, then calls decodeStreams on every ready stream until none is.
//     A window's latency: from the piece that made its stream ready to the
//     end of the decodeStreams call that consumed it. Prints one JSON line:
//     {n, audio_s, cpu_s (this process: decoding, features and the feeding
//     loop), windows, p50_ms, p99_ms, max_ms, calls, mean_batch, lag_ms}.
// sherpa's numThreads is THREADS (1), as hark's INTRA_OP_THREAD_COUNT.
'use strict';
const fs = require('fs');
const path = require('path');
const sherpa = require('sherpa-onnx-node');

const THREADS = parseInt(process.env.THREADS || '1', 10);
const TAIL_MS = parseInt(process.env.TAIL_MS || '660', 10);
// The streams' starts, spread evenly over STAGGER_MS (1000, as
// bench/neural_streams.sh spreads hark's): live callers start at any time.
const STAGGER_MS = parseInt(process.env.STAGGER_MS || '1000', 10);

function readWav(file) {
  const b = fs.readFileSync(file);
  let off = 12;
  let fmt = null;
  while (off + 8 <= b.length) {
    const id = b.toString('ascii', off, off + 4), len = b.readUInt32LE(off + 4);
    if (id === 'fmt ') fmt = {ch: b.readUInt16LE(off + 10), rate: b.readUInt32LE(off + 12),
                              bits: b.readUInt16LE(off + 22)};
    if (id === 'data') {
      if (!fmt || fmt.ch !== 1 || fmt.bits !== 16 || fmt.rate !== 16000)
        throw new Error(file + ': not 16 kHz 16-bit mono');
      const n = Math.floor(Math.min(len, b.length - off - 8) / 2);
      const out = new Float32Array(n);
      for (let i = 0; i < n; i++) out[i] = b.readInt16LE(off + 8 + 2 * i) / 32768;
      return out;
    }
    off += 8 + len + (len & 1);
  }
  throw new Error(file + ': no data chunk');
}

function recognizer(dir) {
  return new sherpa.OnlineRecognizer({
    featConfig: {sampleRate: 16000, featureDim: 80},
    modelConfig: {
      transducer: {encoder: path.join(dir, 'encoder.onnx'), decoder: path.join(dir, 'decoder.onnx'),
                   joiner: path.join(dir, 'joiner.onnx')},
      tokens: path.join(dir, 'tokens.txt'), numThreads: THREADS, provider: 'cpu', debug: 0,
      modelType: 'zipformer2',
    },
    decodingMethod: 'greedy_search',
    enableEndpoint: 0,
  });
}

function tokens(dir, files) {
  const rec = recognizer(dir);
  for (const f of files) {
    const s = rec.createStream();
    s.acceptWaveform({samples: readWav(f), sampleRate: 16000});
    s.acceptWaveform({samples: new Float32Array(16 * TAIL_MS), sampleRate: 16000});
    s.inputFinished();
    while (rec.isReady(s)) rec.decode(s);
    const r = rec.getResult(s);
    console.log(JSON.stringify({file: path.basename(f), tokens: r.tokens, timestamps: r.timestamps}));
  }
}

function quantile(v, q) {
  if (!v.length) return null;
  const s = Float64Array.from(v).sort();
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
}

function run(dir, n, seconds, files) {
  const rec = recognizer(dir);
  const audio = files.map(readWav);
  const PIECE = 1600;
  const now = () => Number(process.hrtime.bigint()) / 1e6;
  const streams = [];
  const t0 = now() + 200;
  for (let i = 0; i < n; i++)
    streams.push({s: rec.createStream(), file: i % audio.length, pos: 0, fed: 0,
                  next: t0 + (i * STAGGER_MS) / n, waiting: null, lastPiece: 0});
  const lat = [];
  let calls = 0, decoded = 0, audioS = 0, lag = 0;
  const end = t0 + seconds * 1000;
  const cpu0 = process.cpuUsage();
  const w0 = now();
  for (;;) {
    const t = now();
    if (t >= end) break;
    for (const st of streams) {
      while (st.next <= t && st.next < end) {
        const a = audio[st.file];
        const piece = a.subarray(st.pos, Math.min(a.length, st.pos + PIECE));
        st.s.acceptWaveform({samples: piece, sampleRate: 16000});
        audioS += piece.length / 16000;
        lag = Math.max(lag, t - st.next);
        st.lastPiece = st.next;
        st.pos += PIECE;
        if (st.pos >= a.length) { st.pos = 0; st.file = (st.file + 1) % audio.length; }
        st.next += 100;
        if (st.waiting === null && rec.isReady(st.s)) st.waiting = st.lastPiece;
      }
    }
    for (;;) {
      const ready = streams.filter((st) => rec.isReady(st.s));
      if (!ready.length) break;
      rec.decodeStreams(ready.map((st) => st.s));
      calls++;
      decoded += ready.length;
      const done = now();
      for (const st of ready) {
        if (st.waiting !== null) lat.push(done - st.waiting);
        // another window already complete: it waited since at most the last piece
        st.waiting = rec.isReady(st.s) ? st.lastPiece : null;
      }
    }
    const sleep = Math.max(0, Math.min(10, Math.min(...streams.map((st) => st.next)) - now()));
    if (sleep > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, sleep);
  }
  const cpu = process.cpuUsage(cpu0);
  console.log(JSON.stringify({
    n, seconds, wall_s: (now() - w0) / 1000, audio_s: audioS,
    cpu_s: (cpu.user + cpu.system) / 1e6, cpu_per_stream_s: (cpu.user + cpu.system) / 1e6 / audioS,
    windows: lat.length, p50_ms: quantile(lat, 0.5), p99_ms: quantile(lat, 0.99),
    max_ms: lat.length ? Math.max(...lat) : null, calls, mean_batch: calls ? decoded / calls : 0,
    feed_lag_max_ms: lag,
  }));
}

const [dir, mode, ...rest] = process.argv.slice(2);
if (mode === 'tokens') tokens(dir, rest);
else if (mode === 'run') run(dir, parseInt(rest[0], 10), parseFloat(rest[1]), rest.slice(2));
else {
  console.error('usage: sherpa_peer.js MODEL_DIR tokens WAV... | run N SECONDS WAV...');
  process.exit(2);
}
