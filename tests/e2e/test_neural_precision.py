"""The neural_asr backend's `precision` and `linear_kernel` parameters, end
to end: the trained digits CTC model (tools/asr_models/train_digits.py,
cached) loaded from its one FP32 TorchScript file as fp32 (its linear
layers on XNNPACK, the default), fp32 on libtorch's BLAS (`linear_kernel
blas`), int8 (its encoder's and CTC head's linear layers dynamically
quantised at load) and bf16 (its encoder in bfloat16), each recognising the
held-out utterances through the real harkd's Vosk WebSocket: XNNPACK, int8
and bf16 within MAX_EXTRA_WER of BLAS fp32's word error rate (and all within
test_neural_trained's 5%). A precision or kernel the backend does not know,
int8 on a model with no linear layer to quantise, XNNPACK asked for with
int8, and bf16 on a model that cannot run in bfloat16 (or on a processor
without AVX512_BF16) fail to load with the reason.
"""
import asyncio
import os
import shutil
import sys
import tempfile
import unittest
from typing import List, Tuple

import torch

import asr_models
from harness import Harkd, main
from test_neural_trained import read_pcm, vosk

MAX_WER = 0.05
MAX_EXTRA_WER = 0.02  # int8 / bf16 against fp32, absolute, on the held-out set

TOKENS = "<blk> 0\n<sos/eos> 1\n\u2581A 2\n\u2581B 3\nC 4\nD 5\n"


def cpu_has(flag):
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return flag in line.split(":", 1)[1].split()
    return False


class EncNoLinear(torch.nn.Module):
    """Eight output frames a chunk from a scale alone: nothing to quantise."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(16))

    def forward(self, x: torch.Tensor, lens: torch.Tensor,
                states: List[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, List[torch.Tensor]]:
        return x[:, :8, :16] * self.scale, lens // 4, [states[0] + 1]

    @torch.jit.export
    def get_init_states(self, batch_size: int = 1,
                        device: torch.device = torch.device("cpu")) -> List[torch.Tensor]:
        return [torch.zeros(batch_size, dtype=torch.int64)]


class EncFloatOnly(EncNoLinear):
    """Casts its input to float32 before its linear layer: cannot run in bf16."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(80, 16)

    def forward(self, x: torch.Tensor, lens: torch.Tensor,
                states: List[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, List[torch.Tensor]]:
        return self.proj(x[:, :8, :].float()), lens // 4, [states[0] + 1]


class EncDouble(EncNoLinear):
    """A float64 linear layer: XNNPACK's GEMM is FP32's, so it stays on BLAS."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(80, 16).double()

    def forward(self, x: torch.Tensor, lens: torch.Tensor,
                states: List[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, List[torch.Tensor]]:
        return self.proj(x[:, :8, :].double()).float(), lens // 4, [states[0] + 1]


class CtcHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.out = torch.nn.Linear(16, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x).log_softmax(-1)


class Ctc(torch.nn.Module):
    def __init__(self, enc):
        super().__init__()
        self.encoder = enc
        self.ctc_output = CtcHead()


class Precision(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = asr_models.trained_dir()
        cls.tests = asr_models.test_set(cls.model)
        cls.repo = tempfile.mkdtemp(prefix="hark-precision-")
        cls.files = tempfile.mkdtemp(prefix="hark-precision-mod-")
        for prec in ("fp32", "int8", "bf16"):
            asr_models.make_model_folder(cls.repo, f"digits_{prec}", cls.model, asr_models.config(
                f"digits_{prec}", params={"family": "ctc", "precision": prec}))
        asr_models.make_model_folder(cls.repo, "digits_blas", cls.model, asr_models.config(
            "digits_blas", params={"family": "ctc", "linear_kernel": "blas"}))

        def save(name, module):
            path = os.path.join(cls.files, name + ".pt")
            torch.jit.save(torch.jit.script(module), path)
            return path

        bad = {
            "prec_fp16": (save("no_linear", Ctc(EncNoLinear())), {"precision": "fp16"}),
            "int8_no_linear": (save("no_linear", Ctc(EncNoLinear())), {"precision": "int8"}),
            "bf16_float_only": (save("float_only", Ctc(EncFloatOnly())), {"precision": "bf16"}),
            "kernel_mkl": (save("float_only", Ctc(EncFloatOnly())), {"linear_kernel": "mkl"}),
            "xnnpack_int8": (save("float_only", Ctc(EncFloatOnly())),
                             {"precision": "int8", "linear_kernel": "xnnpack"}),
        }
        asr_models.make_model_folder(cls.repo, "fp64_layer", None, asr_models.config(
            "fp64_layer", params={"family": "ctc"}), tokens=TOKENS,
            module=save("fp64_layer", Ctc(EncDouble())))
        for name, (module, params) in bad.items():
            asr_models.make_model_folder(cls.repo, name, None, asr_models.config(
                name, params={"family": "ctc", **params}), tokens=TOKENS, module=module)
        cls.server = Harkd(repo=cls.repo, args=("--strict-readiness", "false",
                                                "--stream-backlog-limit", "100000"))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.repo, True)
        shutil.rmtree(cls.files, True)

    def index(self):
        status, doc = self.server.json("POST", "/v2/repository/index")
        self.assertEqual(status, 200)
        return {m["name"]: m for m in doc}

    def wer(self, name):
        url = f"ws://127.0.0.1:{self.server.http_port}/v2/models/{name}/stream"

        async def go():
            sem = asyncio.Semaphore(16)

            async def one(path):
                async with sem:
                    return await vosk(url, read_pcm(path)[0])
            return await asyncio.gather(*(one(p) for p, _ in self.tests))
        errors = words = 0
        for (_, ref), finals in zip(self.tests, asyncio.run(go())):
            hyp = " ".join(f["text"] for f in finals if f["text"]).split()
            errors += asr_models.wer(ref, hyp)
            words += len(ref)
        print(f"\n{name}: WER {errors}/{words} = {100 * errors / words:.2f}%", file=sys.stderr)
        return errors / words

    def test_xnnpack_int8_and_bf16_recognise_within_the_bound_of_fp32(self):
        idx = self.index()
        precs = ["fp32", "int8"] + (["bf16"] if cpu_has("avx512_bf16") else [])
        for name in ["blas"] + precs:
            self.assertEqual(idx[f"digits_{name}"]["state"], "READY", idx[f"digits_{name}"])
        log = self.server.output()  # the load log says each model's precision and kernels
        for prec in precs:
            self.assertRegex(log, rf"'digits_{prec}' version 1: .*precision {prec}\n")
        self.assertRegex(log, r"'digits_fp32' version 1: .*\), [1-9]\d* linear layers on XNNPACK, "
                              r"precision fp32\n")
        self.assertRegex(log, r"'digits_blas' version 1: .*\), linear layers on libtorch's BLAS, "
                              r"precision fp32\n")
        self.assertRegex(log, r"'digits_int8' version 1: precision int8: \d+ linear layers quantised; "
                              r"this libtorch's oneDNN rebuilds")
        base = self.wer("digits_blas")
        self.assertLessEqual(base, MAX_WER)
        for prec in precs:
            w = self.wer(f"digits_{prec}")
            self.assertLessEqual(w, base + MAX_EXTRA_WER, f"{prec} against BLAS fp32 {base}")
            self.assertLessEqual(w, MAX_WER, prec)

    def test_a_float64_layer_stays_on_blas(self):
        self.assertEqual(self.index()["fp64_layer"]["state"], "READY")
        # the CTC head's FP32 layer on XNNPACK, the encoder's float64 one not
        self.assertRegex(self.server.output(),
                         r"'fp64_layer' version 1: .*\), 1 linear layers on XNNPACK, precision fp32\n")

    def test_what_cannot_run_fails_to_load_with_the_reason(self):
        idx = self.index()
        expect = {
            "prec_fp16": "parameter precision must be 'fp32', 'int8' or 'bf16', got 'fp16'",
            "int8_no_linear": "parameter precision int8: the encoder's forward has no linear layer",
            "kernel_mkl": "parameter linear_kernel must be 'xnnpack' or 'blas', got 'mkl'",
            "xnnpack_int8": "parameter linear_kernel xnnpack is for precision fp32; precision int8",
            "bf16_float_only": "(parameter precision bf16: the model does not run so"
                               if cpu_has("avx512_bf16") else
                               "parameter precision bf16: this processor has no AVX512_BF16",
        }
        if not cpu_has("avx512_bf16"):
            expect["digits_bf16"] = "this processor has no AVX512_BF16"
        for name, why in expect.items():
            self.assertEqual(idx[name]["state"], "UNAVAILABLE", idx[name])
            self.assertIn(f"model '{name}'", idx[name]["reason"])
            self.assertIn(why, idx[name]["reason"])


if __name__ == "__main__":
    main()
