#!/usr/bin/python3
"""First-word latency for bench/neural_streams.sh: P probe streams over the
Vosk WebSocket (URL: ws://HOST:PORT/v2/models/MODEL/stream), each sending
one LibriVox file (probe i: file i mod files) at real time in 100 ms
messages (the same pacing as `hark transcribe --simulate-realtime`), their
starts spread over STAGGER_MS, while `hark transcribe` keeps the other
streams of the trial live.

    /usr/bin/python3 bench/nasr_first_word.py URL PROBES WAV [WAV ...]

For every word of every final result (Vosk "result" words with "end" in
seconds of the stream's audio), the latency is from the moment that audio
was due at real time (stream start + end) to the arrival of the first
reply that holds the word: a partial whose words begin with the final's
words up to and including it (the partials of an utterance grow; a word
first shown wrong and corrected later counts from the correction), or the
final itself. Prints one JSON object: {"words", "p50_ms", "p90_ms",
"p99_ms", "max_ms", "streams", "errors"}.
"""
import asyncio
import json
import os
import sys
import time
import wave

import websockets

CHUNK_MS = 100


def pcm(path):
    with wave.open(path, "rb") as w:
        if w.getframerate() != 16000 or w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise SystemExit(f"{path}: need 16 kHz mono 16-bit PCM")
        return w.readframes(w.getnframes())


async def probe(url, audio, delay, lat, errors):
    await asyncio.sleep(delay)
    try:
        async with websockets.connect(url, max_size=None) as ws:
            await ws.send(json.dumps({"config": {"sample_rate": 16000, "words": 1}}))
            step = 16000 * 2 * CHUNK_MS // 1000
            t0 = time.monotonic()
            replies = []  # (arrival, doc)

            async def reader():
                async for msg in ws:
                    replies.append((time.monotonic(), json.loads(msg)))

            rd = asyncio.ensure_future(reader())
            for k in range(0, len(audio), step):
                due = t0 + (k // step) * CHUNK_MS / 1000
                await asyncio.sleep(max(0, due - time.monotonic()))
                await ws.send(audio[k:k + step])
            await ws.send('{"eof" : 1}')
            try:
                await asyncio.wait_for(rd, 30)
            except asyncio.TimeoutError:
                errors.append("no close after eof")
    except Exception as e:  # noqa: BLE001 — a probe's failure is reported, not fatal
        errors.append(repr(e))
        return
    partials = []  # the current utterance's (arrival, words)
    for at, d in replies:
        if "partial" in d:
            partials.append((at, d["partial"].split()))
        elif "result" in d or "text" in d:
            words = [w["word"] for w in d.get("result", [])]
            for i, w in enumerate(d.get("result", [])):
                shown = next((a for a, p in partials if p[:i + 1] == words[:i + 1]), at)
                lat.append((shown - (t0 + float(w["end"]))) * 1000)
            partials = []


async def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    url, probes, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    stagger = int(os.environ.get("STAGGER_MS", "1000")) / 1000
    audio = [pcm(f) for f in files]
    lat, errors = [], []
    await asyncio.gather(*(probe(url, audio[i % len(audio)], stagger * i / probes, lat, errors)
                           for i in range(probes)))
    lat.sort()
    q = lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))], 1) if lat else None
    print(json.dumps({"words": len(lat), "p50_ms": q(0.5), "p90_ms": q(0.9), "p99_ms": q(0.99),
                      "max_ms": round(lat[-1], 1) if lat else None, "streams": probes,
                      "errors": errors}))


asyncio.run(main())
