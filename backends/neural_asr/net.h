/*
 * net.h — the network behind a neural recogniser: a streaming encoder and
 * the search over its output, on libtorch (net.cc, the backend's only
 * C++). The rest of the backend is C and sees only this header.
 *
 * The model contract is icefall's streaming export (docs/neural-asr.md): a
 * TorchScript module with an `encoder` (features, lengths, states ->
 * encoder_out, lengths, new states; get_init_states(batch_size, device))
 * and either a transducer's `decoder` + `joiner` or a CTC head
 * `ctc_output`. A state tensor's batch axis is discovered at load, as the
 * one axis whose size differs between get_init_states(1) and (2); a round
 * gathers its streams' states along those axes into one encoder call and
 * scatters the new states back, so streams at any position share a call.
 *
 * Threads: one asr_net serves every instance of a model (a TorchScript
 * module's forward is safe from several threads; nothing in asr_net
 * changes after load); an asr_net_stream belongs to one stream, whose
 * requests the sequence batcher runs one at a time, on any instance.
 */
#ifndef HARK_NEURAL_ASR_NET_H
#define HARK_NEURAL_ASR_NET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum asr_family { ASR_TRANSDUCER = 0, ASR_CTC } asr_family;
/* Greedy: the best token each frame. Beam: a transducer's modified beam
 * search (icefall's, at most one token a frame) or CTC prefix beam search,
 * `beam` hypotheses kept: the n-best. */
typedef enum asr_search { ASR_GREEDY = 0, ASR_BEAM } asr_search;
/* The network's arithmetic (parameter `precision`), made at load from the
 * FP32 file. INT8: every linear layer of the encoder and of the joiner's /
 * CTC head's forward (aten::linear on the module's own weights) becomes a
 * dynamically quantised one (int8 weights per output channel, activations
 * quantised per call; libtorch's oneDNN or FBGEMM engine). BF16: the
 * encoder's floating weights, its input and its states in bfloat16 (the
 * processor must have AVX512_BF16), its output back to float for the
 * search, which stays FP32. A model or processor that cannot fails to
 * load with the reason. */
typedef enum asr_precision { ASR_FP32 = 0, ASR_INT8, ASR_BF16 } asr_precision;
/* The kernel of an FP32 network's linear layers (parameter
 * `linear_kernel`): every aten::linear on a module's own weights in the
 * encoder's and the joiner's / CTC head's forward made, at load, XNNPACK's
 * GEMM on weights packed once (the default); or left to libtorch, whose
 * aten::linear hands the weights to its BLAS to be packed again on every
 * call (`blas`). The default falls back to `blas`, with the reason, where
 * XNNPACK cannot pack a layer; asked for by name, it fails to load. */
typedef enum asr_linear { ASR_LINEAR_DEFAULT = 0, ASR_LINEAR_XNNPACK, ASR_LINEAR_BLAS } asr_linear;

typedef struct asr_net_opts {
  const char *model_label; /* "neural_asr: model 'x' version 1", for messages */
  const char *file;        /* the TorchScript file */
  asr_family family;
  int family_given;      /* 0: detect (a ctc_output and no joiner is CTC) */
  uint32_t chunk_frames; /* feature frames a chunk advances (decode_chunk_len) */
  uint32_t pad_frames;   /* right context after them (the next chunk sees it again) */
  int chunk_given;       /* 0: the encoder's decode_chunk_len / pad_length */
  int64_t ctc_blank;     /* a CTC model's blank (<blk> in tokens.txt) */
  uint32_t feature_dim;  /* num_mel_bins */
  uint32_t vocab_size;   /* tokens in tokens.txt: the joiner / CTC head must produce as many */
  asr_search search;
  uint32_t beam; /* hypotheses kept (ASR_BEAM) */
  int intra_threads;
  asr_precision precision;
  asr_linear linear;
} asr_net_opts;

/* What the model turned out to be, found by one dry run at load. */
typedef struct asr_net_info {
  asr_family family;
  int64_t blank_id;
  int64_t context_size;              /* the decoder's (transducer) */
  uint32_t out_frames;               /* encoder frames per chunk (T') */
  uint32_t chunk_frames, pad_frames; /* the chunking in force */
  uint32_t n_states;                 /* tensors in the encoder's state list */
  size_t state_bytes;                /* one stream's state, all tensors */
  uint32_t quantised;                /* INT8: linear layers made int8 */
  uint32_t packed;                   /* linear layers on XNNPACK (0: BLAS) */
  char linear_note[256]; /* why the default's load on XNNPACK failed, so BLAS ("": it did not) */
} asr_net_info;

typedef struct asr_net asr_net;
typedef struct asr_net_stream asr_net_stream;

/* Loads and checks the module (a dry run of every part); NULL with the
 * reason (naming the model, the file and what differs) in err. Free with
 * asr_net_free. */
asr_net *asr_net_load(const asr_net_opts *o, char *err, size_t errlen);
void asr_net_free(asr_net *net);
const asr_net_info *asr_net_get_info(const asr_net *net);

/* A stream's encoder states (get_init_states(1)) and search state. NULL
 * with a reason in err. Free with asr_net_stream_free (NULL is fine). */
asr_net_stream *asr_net_stream_new(asr_net *net, char *err, size_t errlen);
void asr_net_stream_free(asr_net_stream *s);
/* A new utterance: the search starts afresh (the encoder keeps its states,
 * as sherpa's endpointing does). */
void asr_net_stream_reset_search(asr_net_stream *s);

/* One hypothesis of the open utterance: its tokens, each with the encoder
 * frame that emitted it (counted from the stream's start) and its
 * probability there, and its log probability. The arrays belong to the
 * stream and hold until its next step or reset. */
typedef struct asr_hyp {
  const int32_t *tokens;
  const uint64_t *frames;
  const uint64_t *ends; /* the last frame each token held (a CTC token's repeats), else frames */
  const float *probs;
  uint32_t n;
  float score;
} asr_hyp;

/* Up to k of the stream's hypotheses into out, best first; how many. */
uint32_t asr_net_stream_hyps(const asr_net_stream *s, uint32_t k, asr_hyp *out);
/* Encoder frames the stream has been through. */
uint64_t asr_net_stream_frames(const asr_net_stream *s);

/*
 * One round: streams[i]'s chunk of (chunk_frames + pad_frames) x
 * feature_dim features (row-major floats) at feats[i], all in one encoder
 * call, then the search for all of them. The states and hypotheses of
 * every stream move on. Returns 0; on a failure (the module threw, a shape
 * it returned) -1 with the reason in err, and no stream's state changed.
 */
int asr_net_step(asr_net *net, asr_net_stream **streams, const float *const *feats, uint32_t n,
                 char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
