"""The neural recognition tests' models, made by tools/asr_models and cached
outside git (nothing is fetched): a model folder per (family, size, seed,
the scripts' own text), and beside each model the plain-PyTorch
reference's results for the files it decoded.

    model_dir("transducer", "tiny", 1)  -> DIR with model.pt, tokens.txt
    reference(DIR, "transducer", wavs)  -> [ {file, tokens, frames, text,
                                              words, near_ties, ...} ]

The cache is /var/cache/hark/asr_models (HARK_ASR_CACHE overrides it), or
~/.cache/hark/asr_models when that cannot be written.
"""
import glob
import hashlib
import json
import os
import subprocess
import tempfile

SOURCE_DIR = os.environ.get("HARK_SOURCE_DIR",
                            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TOOLS = os.path.join(SOURCE_DIR, "tools", "asr_models")
PYTHON = "/usr/bin/python3"
LIBRIVOX = sorted(glob.glob("/usr/share/pocketsphinx/test/data/librivox/*.wav"))


def _cache_root():
    for root in (os.environ.get("HARK_ASR_CACHE"), "/var/cache/hark/asr_models",
                 os.path.expanduser("~/.cache/hark/asr_models")):
        if not root:
            continue
        try:
            os.makedirs(root, exist_ok=True)
            probe = tempfile.NamedTemporaryFile(dir=root)
            probe.close()
            return root
        except OSError:
            continue
    raise RuntimeError("no writable cache for the neural test models")


# What each cached thing is keyed by: the scripts that make it. The random
# models come from make_model.py and asrmodel.py; the trained one also from
# train_digits.py and reference.py (its features and held-out decoding); the
# reference decodes cached beside a model from reference.py alone, so a
# change to the reference search recomputes them without making the models
# again.
MADE_BY = ("asrmodel.py", "make_model.py")
TRAINED_BY = ("asrmodel.py", "reference.py", "train_digits.py")


def _scripts_hash(*args, scripts):
    h = hashlib.sha256()
    for name in scripts:
        with open(os.path.join(TOOLS, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    h.update(repr(args).encode())
    return h.hexdigest()[:16]


def _atomic_build(final, build):
    """build(tmpdir) fills a folder that becomes `final` in one rename, so
    concurrent tests never see half a model."""
    if os.path.isdir(final):
        return final
    tmp = tempfile.mkdtemp(prefix=os.path.basename(final) + ".", dir=os.path.dirname(final))
    build(tmp)
    try:
        os.rename(tmp, final)
    except OSError:  # another test won the race: theirs is the same
        subprocess.run(["rm", "-rf", tmp], check=False)
    return final


def model_dir(family, size="tiny", seed=1, extra=()):
    args = (family, size, seed, tuple(extra))
    key = _scripts_hash(*args, scripts=MADE_BY)
    final = os.path.join(_cache_root(), f"{size}-{family}-{seed}-{key}")

    def build(tmp):
        subprocess.run([PYTHON, os.path.join(TOOLS, "make_model.py"), "--out", tmp, "--family",
                        family, "--size", size, "--seed", str(seed), *extra],
                       check=True, stdout=subprocess.DEVNULL)
    return _atomic_build(final, build)


def trained_dir(seed=1):
    """The small CTC model trained on synthesised digits and commands
    (tools/asr_models/train_digits.py): DIR with model.pt, tokens.txt and
    test/ (held-out WAVs, test/transcripts.txt "NNN.wav WORD ..."). Trained
    once per cache (a few minutes on 2 cores)."""
    key = _scripts_hash("digits", seed, scripts=TRAINED_BY)
    final = os.path.join(_cache_root(), f"digits-{seed}-{key}")

    def build(tmp):
        subprocess.run([PYTHON, os.path.join(TOOLS, "train_digits.py"), "--out", tmp, "--seed",
                        str(seed)], check=True, stdout=subprocess.DEVNULL)
    return _atomic_build(final, build)


def test_set(model):
    """[(wav path, [WORD, ...])] of a trained model's held-out set."""
    out = []
    with open(os.path.join(model, "test", "transcripts.txt")) as f:
        for line in f:
            parts = line.split()
            if parts:
                out.append((os.path.join(model, "test", parts[0]), parts[1:]))
    return out


def wer(ref_words, hyp_words):
    """Word errors (edit distance) of hyp against ref."""
    d = list(range(len(hyp_words) + 1))
    for i, r in enumerate(ref_words, 1):
        prev, d[0] = d[0], i
        for j, h in enumerate(hyp_words, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r != h))
    return d[len(hyp_words)]


def reference(model, family, wavs, chunk=32, pad=13):
    """The reference decoder's results for each wav, alone (cached in the
    model's folder)."""
    key = _scripts_hash(family, chunk, pad, [os.path.abspath(w) for w in wavs],
                        scripts=("reference.py",))
    path = os.path.join(model, f"reference-{key}.jsonl")
    if not os.path.exists(path):
        out = subprocess.run([PYTHON, os.path.join(TOOLS, "reference.py"), "--model", model,
                              "--family", family, "--chunk", str(chunk), "--pad", str(pad),
                              "--json", *wavs], check=True, capture_output=True, text=True).stdout
        fd, tmp = tempfile.mkstemp(dir=model)
        with os.fdopen(fd, "w") as f:
            f.write(out)
        os.rename(tmp, path)
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def config(name, max_batch=64, instances=1, params=None, delay_us=2000, extra="", vad_model=None):
    """A config.pbtxt for a neural_asr model with the speech outputs
    (chunks of 32 + 13 frames unless params say otherwise); vad_model
    names a VAD that gates it (input VAD_PROB)."""
    # One libtorch thread: a second one's OpenMP worker is more than a
    # 2-core machine running two tests at once can feed.
    params = dict({"decode_chunk_len": "32", "pad_length": "13", "INTRA_OP_THREAD_COUNT": "1"},
                  **(params or {}))
    vad_input = ""
    if vad_model:
        params["vad_model"] = vad_model
        vad_input = ',\n  { name: "VAD_PROB" data_type: TYPE_FP32 dims: [ -1 ] optional: true }'
    plines = ",\n".join(f'  {{ key: "{k}" value: {{ string_value: "{v}" }} }}'
                        for k, v in params.items())
    return f'''name: "{name}"
backend: "neural_asr"
max_batch_size: {max_batch}
input [
  {{ name: "AUDIO" data_type: TYPE_STRING dims: [ 1 ] }}{vad_input}
]
output [
  {{ name: "TRANSCRIPT" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "IS_FINAL" data_type: TYPE_BOOL dims: [ 1 ] }},
  {{ name: "WORDS" data_type: TYPE_STRING dims: [ -1 ] }},
  {{ name: "WORD_START" data_type: TYPE_FP32 dims: [ -1 ] }},
  {{ name: "WORD_END" data_type: TYPE_FP32 dims: [ -1 ] }},
  {{ name: "WORD_CONF" data_type: TYPE_FP32 dims: [ -1 ] }},
  {{ name: "CONFIDENCE" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "AUDIO_PROCESSED" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "ALTERNATIVES" data_type: TYPE_STRING dims: [ -1 ] }},
  {{ name: "ALTERNATIVE_CONFIDENCE" data_type: TYPE_FP32 dims: [ -1 ] }},
  {{ name: "STABILITY" data_type: TYPE_FP32 dims: [ 1 ] }}
]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
sequence_batching {{
  max_sequence_idle_microseconds: 60000000
  oldest {{ max_candidate_sequences: 4096 max_queue_delay_microseconds: {delay_us} }}
}}
{extra}
parameters [
{plines}
]
'''


def make_model_folder(repo, name, model, cfg, tokens=None, module=None):
    """repo/name/{config.pbtxt, 1/model.pt, 1/tokens.txt}, the files linked
    from the cache (or given)."""
    d = os.path.join(repo, name, "1")
    os.makedirs(d)
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(cfg)
    if module is not None:
        module_src = module
    else:
        module_src = os.path.join(model, "model.pt")
    if module_src:
        os.symlink(module_src, os.path.join(d, "model.pt"))
    if tokens is None:
        os.symlink(os.path.join(model, "tokens.txt"), os.path.join(d, "tokens.txt"))
    elif tokens is not False:
        with open(os.path.join(d, "tokens.txt"), "w") as f:
            f.write(tokens)


if __name__ == "__main__":
    # scripts/setup.sh: train the digits model ahead of the tests (minutes
    # once per machine; the tests would otherwise train it inside ctest's
    # time limit), and make the random test models.
    print("asr_models: digits", trained_dir())
    for fam in ("transducer", "ctc"):
        print("asr_models:", fam, model_dir(fam, "tiny", 1))
