"""hark's streaming Kaldi filter bank (src/audio/fbank.c) against
torchaudio's offline one (torchaudio.compliance.kaldi.fbank).

bin/fbank_dump runs each LibriVox recording through hark_audio_norm and
hark_fbank the way a backend runs a stream: the file's bytes (its WAV
header first) in uneven chunks from a fixed seed, every ready frame read
and popped after each chunk, the stream finished at the end. Its frames
must be torchaudio's, frame for frame, within 1e-3 (log mel energies run
from about -16 to +20), at both input scales a model may expect (int16's
range, and [-1, 1]); and bit for bit the same however the audio is cut.

torchaudio (Debian's python3-torchaudio) is installed by scripts/setup.sh:
a machine without it fails this test rather than skipping it.
"""
import glob
import os
import subprocess
import unittest
import wave

import numpy as np
import torch
import torchaudio

from harness import BIN_DIR, main

LIBRIVOX = sorted(glob.glob("/usr/share/pocketsphinx/test/data/librivox/*.wav"))
TOLERANCE = 1e-3


def read_pcm(path):
    with wave.open(path) as w:
        assert w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def dump(path, *args):
    """fbank_dump's frames for `path`, as a (frames, dim) float32 array."""
    out = subprocess.run([os.path.join(BIN_DIR, "fbank_dump"), *args, path],
                         check=True, capture_output=True, timeout=120).stdout
    frames, dim = np.frombuffer(out[:8], dtype="<u4")
    rows = np.frombuffer(out[8:], dtype="<f4")
    assert rows.size == int(frames) * int(dim), (path, frames, dim, rows.size)
    return rows.reshape(int(frames), int(dim))


def reference(samples, scale, **kw):
    wave_t = torch.from_numpy(samples.astype(np.float32) * np.float32(scale)).unsqueeze(0)
    opts = dict(num_mel_bins=80, dither=0.0, snip_edges=False, energy_floor=0.0,
                sample_frequency=16000, high_freq=-400, low_freq=20)
    opts.update(kw)
    return torchaudio.compliance.kaldi.fbank(wave_t, **opts).numpy()


class FbankTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)

    def test_librivox_files_exist(self):
        self.assertEqual(len(LIBRIVOX), 5, "pocketsphinx-testdata's LibriVox recordings")

    def test_matches_torchaudio_in_uneven_chunks(self):
        # Every recording, both scales, three chunkings (seeds): every
        # frame both compute, within TOLERANCE.
        worst = 0.0
        for i, path in enumerate(LIBRIVOX):
            rate, samples = read_pcm(path)
            self.assertEqual(rate, 16000, path)
            for scale, arg in ((1.0, "1"), (1.0 / 32768, "3.0517578125e-05")):
                ref = reference(samples, scale)
                self.assertEqual(ref.shape[0], (len(samples) + 80) // 160)
                for seed, max_chunk in ((i + 1, 7000), (100 + i, 333), (200 + i, 64000)):
                    ours = dump(path, "--scale", arg, "--seed", str(seed), "--max-chunk",
                                str(max_chunk))
                    self.assertEqual(ours.shape, ref.shape, (path, seed))
                    diff = float(np.abs(ours.astype(np.float64) - ref).max())
                    worst = max(worst, diff)
                    self.assertLess(diff, TOLERANCE, (path, scale, seed))
        print(f"\nfbank: max |hark - torchaudio| over 5 files, 2 scales, 3 chunkings: {worst:.2e}")

    def test_chunking_is_bit_exact(self):
        for i, path in enumerate(LIBRIVOX):
            whole = dump(path)
            for seed, max_chunk in ((7 + i, 5), (11 + i, 401), (13 + i, 3201)):
                cut = dump(path, "--seed", str(seed), "--max-chunk", str(max_chunk))
                self.assertTrue(np.array_equal(whole, cut), (path, seed, max_chunk))

    def test_other_options_match_torchaudio(self):
        # The windows, the energy column, snip_edges and another bin count,
        # on one recording.
        path = LIBRIVOX[1]
        _, samples = read_pcm(path)
        cases = [
            (["--window", "hamming"], dict(window_type="hamming")),
            (["--window", "hanning"], dict(window_type="hanning")),
            (["--window", "rectangular"], dict(window_type="rectangular")),
            (["--energy"], dict(use_energy=True)),
            (["--snip-edges"], dict(snip_edges=True)),
            (["--bins", "23"], dict(num_mel_bins=23)),
        ]
        for args, kw in cases:
            ref = reference(samples, 1.0, **kw)
            ours = dump(path, "--seed", "5", "--max-chunk", "2000", *args)
            self.assertEqual(ours.shape, ref.shape, args)
            diff = float(np.abs(ours.astype(np.float64) - ref).max())
            self.assertLess(diff, TOLERANCE, args)


if __name__ == "__main__":
    main()
