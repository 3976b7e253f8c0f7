"""Latency profiles (accurate, fast) and degradation: the model's
degraded state and each stream's breaker.

Against the real harkd over real sockets, with the helpers of test_speech.
"""
import asyncio
import json
import os
import re
import shutil

import websockets

from harness import MODELS, Harkd, main, make_repo, metric_value
from test_speech import CHUNK, FILES, SpeechTest, joined, pcm, stream


class SpeechProfiles(SpeechTest):
    def test_latency_profiles(self):
        # "fast" (first pass only, narrower beams) is selectable per stream
        # and per request; "accurate" is the model's default and keeps the
        # library's words. A profile that does not exist closes the stream
        # with the reason.
        rate, audio = pcm(FILES[1])
        fast, _ = self.run_async(stream(self.uri, audio, rate, profile="fast"))
        accurate, _ = self.run_async(stream(self.uri, audio, rate, profile="accurate"))
        self.assertEqual(joined(accurate), self.refs[FILES[1]])
        self.assertTrue(joined(fast))
        with open(FILES[1], "rb") as f:
            data = f.read()
        outputs = self.offline(data, {"profile": "fast"})
        self.assertEqual(outputs["TRANSCRIPT"]["data"][0], joined(fast))

        async def bad():
            async with websockets.connect(self.uri) as ws:
                await ws.send(json.dumps({"config": {"profile": "quick"}}))
                await ws.send(audio[:CHUNK])
                with self.assertRaises(websockets.ConnectionClosed):
                    await asyncio.wait_for(ws.recv(), 30)
                return ws.close_code, ws.close_reason
        code, reason = self.run_async(bad())
        self.assertEqual(code, 1007)
        self.assertIn("profile 'quick' does not exist", reason)

    def test_degradation_and_breaker(self):
        # "asr": a model whose bound every reply misses, with a breaker no
        # reply reaches: after one window it is degraded (new utterances
        # decode fast). "asr_breaker": a stream's breaker trips at its first
        # reply, and a stream whose breaker tripped no longer counts in the
        # model's windows, so one late stream cannot degrade the model. /metrics and the log say so.
        with open(os.path.join(MODELS, "asr", "config.pbtxt")) as f:
            asr = f.read()

        def variant(name, knobs):
            extra = "".join(f'  {{ key: "{k}" value: {{ string_value: "{v}" }} }},\n'
                            for k, v in knobs.items())
            text = asr.replace('name: "asr"', f'name: "{name}"', 1)
            return text.replace("parameters [\n", "parameters [\n" + extra, 1)
        window = {"degrade": "true", "degrade_window_ms": "100", "degrade_p99_ms": "1",
                  "degrade_windows": "1"}
        repo = make_repo({"asr": variant("asr", dict(window, breaker_ms="600000")),
                          "asr_breaker": variant("asr_breaker", dict(window, breaker_ms="1"))})
        rate, audio = pcm(FILES[1])
        try:
            server = Harkd(repo)
            try:
                uri = f"ws://127.0.0.1:{server.http_port}/v2/models/asr/stream"
                self.run_async(stream(uri, audio, rate, chunk=CHUNK * 3))
                late, _ = self.run_async(stream(uri, audio, rate, chunk=CHUNK * 3))
                fast, _ = self.run_async(stream(self.uri, audio, rate, chunk=CHUNK * 3,
                                                profile="fast"))
                # the stream after the switch decoded with the fast profile
                self.assertEqual(joined(late), joined(fast))
                buri = f"ws://127.0.0.1:{server.http_port}/v2/models/asr_breaker/stream"
                # one stream whose every reply misses the bound: only its
                # first (which trips the breaker) is judged, so no window
                # closes (the code before this counted the rest: degraded)
                self.run_async(stream(buri, audio, rate, chunk=CHUNK * 3))
                m = server.metrics()
                self.assertEqual(metric_value(m, "hark_asr_degraded", model="asr"), 1)
                self.assertGreaterEqual(
                    metric_value(m, "hark_asr_degrade_transitions_total", model="asr"), 1)
                self.assertEqual(metric_value(m, "hark_asr_breaker_trips_total", model="asr"), 0)
                self.assertEqual(
                    metric_value(m, "hark_asr_breaker_trips_total", model="asr_breaker"), 1)
                self.assertEqual(metric_value(m, "hark_asr_degraded", model="asr_breaker"), 0)
                log = server.output()
                self.assertIn("new utterances decode with the fast profile", log)
                self.assertIn("breaker: a reply took", log)
            finally:
                server.stop()
        finally:
            shutil.rmtree(repo, ignore_errors=True)

    def test_quiet_speaker_gives_its_decoder_back(self):
        # Issue 13, finding 6: quiet speakers (a second of speech, then two
        # bytes now and then) held every decoder while nobody else got a
        # transcript. With one decoder and decoder_idle_ms 1000, the quiet
        # speaker's decoder goes back once its audio falls a second behind
        # the clock, and another client streams a whole recording.
        with open(os.path.join(MODELS, "asr", "config.pbtxt")) as f:
            asr = f.read()
        asr = re.sub(r'  \{ key: "decoder_pool_size".*\n', "", asr)
        extra = ('  { key: "decoder_pool_size" value: { string_value: "1" } },\n'
                 '  { key: "decoder_pool_spare" value: { string_value: "0" } },\n'
                 '  { key: "decoder_idle_ms" value: { string_value: "1000" } },\n')
        repo = make_repo({"asr": asr.replace("parameters [\n", "parameters [\n" + extra, 1)})
        rate, audio = pcm(FILES[0])
        try:
            server = Harkd(repo)
            try:
                uri = f"ws://127.0.0.1:{server.http_port}/"

                async def quiet():
                    async with websockets.connect(uri) as ws:
                        await ws.send(json.dumps({"config": {"sample_rate": rate}}))
                        for off in range(0, 16 * CHUNK, CHUNK):  # 1.6 s of speech
                            await ws.send(audio[off:off + CHUNK])
                            await asyncio.wait_for(ws.recv(), 30)
                        replies = []
                        for i in range(6):  # then two bytes every 0.8 s
                            await asyncio.sleep(0.8)
                            await ws.send(audio[16 * CHUNK + 2 * i:16 * CHUNK + 2 * i + 2])
                            replies.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
                        return replies

                async def both():
                    q = asyncio.create_task(quiet())
                    await asyncio.sleep(2.5)  # the quiet one holds the decoder now
                    other = await stream(uri, audio, rate)
                    return await q, other
                replies, (finals, _) = self.run_async(both())
                # the quiet speaker got the final of what it said
                self.assertTrue(any(r.get("text") for r in replies), replies)
                self.assertTrue(joined(finals))
                m = server.metrics()
                self.assertGreaterEqual(metric_value(m, "hark_decoder_stalls_total", model="asr"), 1)
            finally:
                server.stop()
        finally:
            shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    main()
