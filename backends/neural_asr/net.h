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
 * Threads: an asr_net belongs to one instance (the server never runs two
 * executes on one instance at once); an asr_net_stream belongs to one
 * stream and may move between instances of the same model.
 */
#ifndef HARK_NEURAL_ASR_NET_H
#define HARK_NEURAL_ASR_NET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum asr_family { ASR_TRANSDUCER = 0, ASR_CTC } asr_family;

typedef struct asr_net_opts {
  const char *model_label; /* "neural_asr: model 'x' version 1", for messages */
  const char *file;        /* the TorchScript file */
  asr_family family;
  int family_given;      /* 0: detect (a ctc_output and no joiner is CTC) */
  uint32_t chunk_frames; /* feature frames a chunk advances (decode_chunk_len) */
  uint32_t pad_frames;   /* right context after them (the next chunk sees it again) */
  uint32_t feature_dim;  /* num_mel_bins */
  uint32_t vocab_size;   /* tokens in tokens.txt: the joiner / CTC head must produce as many */
  int intra_threads;
} asr_net_opts;

/* What the model turned out to be, found by one dry run at load. */
typedef struct asr_net_info {
  asr_family family;
  int64_t blank_id;
  int64_t context_size; /* the decoder's (transducer) */
  uint32_t out_frames;  /* encoder frames per chunk (T') */
  uint32_t n_states;    /* tensors in the encoder's state list */
  size_t state_bytes;   /* one stream's state, all tensors */
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

/* One token the search emitted. */
typedef struct asr_emit {
  int32_t token;
  uint32_t frame; /* the encoder frame within the chunk, 0..out_frames-1 */
  float prob;     /* its probability at that frame */
} asr_emit;

/* What one chunk of one stream gave. `emits` is the caller's array of
 * out_frames entries (at most one token per frame). */
typedef struct asr_chunk_out {
  asr_emit *emits;
  uint32_t n_emits;
  /* 1 + the frame of the chunk's last emitted token (0 when none): frames
   * after it are trailing blanks, for endpointing */
  uint32_t last_emit_end;
} asr_chunk_out;

/*
 * One round: streams[i]'s chunk of (chunk_frames + pad_frames) x
 * feature_dim features (row-major floats) at feats[i], all in one encoder
 * call, then the search for all of them. The states and search states of
 * every stream move on. Returns 0; on a failure (the module threw, a shape
 * it returned) -1 with the reason in err, and no stream's state changed.
 */
int asr_net_step(asr_net *net, asr_net_stream **streams, const float *const *feats, uint32_t n,
                 asr_chunk_out *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
