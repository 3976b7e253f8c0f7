/*
 * hark/audio.h — audio helpers for backends and tools: WAV headers,
 * G.711 expansion, a streaming resampler (libsoxr), one normaliser that
 * puts them together for a stream, and a streaming Kaldi filter-bank
 * extractor. Independent of the engine: the library libhark_audio.a is
 * linked into the backends that need it (pocketsphinx, neural_asr) and
 * into the CLI, never reached through harkd.
 *
 * WAV: recognises a RIFF/WAVE header at the start of a byte buffer, so a
 * client may send a .wav file where raw PCM is expected. Pure parsing: no
 * allocation, safe on truncated or hostile input.
 *
 * Resampling: a stream sent at any rate from 8 kHz to 48 kHz reaches the
 * model at its own rate. Equal rates pass samples through untouched (no
 * soxr at all). One resampler belongs to one stream; not thread-safe.
 *
 * Normaliser (hark_audio_norm): a stream's bytes as a client sends them
 * (maybe a WAV file first; else raw 16-bit PCM or G.711) in, 16-bit
 * samples at the model's rate out. One per stream; not thread-safe.
 *
 * Filter bank (hark_fbank): Kaldi's compute-fbank features (log mel
 * energies), frame by frame as the audio arrives, equal to an offline
 * extractor's (torchaudio.compliance.kaldi.fbank) once the stream is
 * finished. A hark_fbank_bank holds what depends only on the options
 * (window, FFT tables, mel weights): made once per model, read-only, shared
 * by any number of streams on any threads. A hark_fbank is one stream's
 * state (a window's worth of samples and its unread frames): cheap, one
 * per stream, not thread-safe.
 */
#ifndef HARK_AUDIO_H
#define HARK_AUDIO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- WAV ------------------------------------------------------------------ */

typedef enum hark_wav_encoding {
  HARK_WAV_PCM16 = 0, /* 16-bit little-endian linear PCM */
  HARK_WAV_MULAW,     /* 8-bit G.711 mu-law (WAVE_FORMAT_MULAW, 7) */
  HARK_WAV_ALAW,      /* 8-bit G.711 A-law (WAVE_FORMAT_ALAW, 6) */
} hark_wav_encoding;

typedef struct hark_wav_info {
  hark_wav_encoding encoding;
  uint32_t sample_rate;
  uint16_t channels;
  uint16_t bits_per_sample;
  size_t data_offset; /* first byte of the samples in the buffer */
  size_t data_size;   /* bytes of samples present (clamped to the buffer) */
} hark_wav_info;

typedef enum hark_wav_status {
  HARK_WAV_OK = 0,
  HARK_WAV_NOT_WAV,     /* does not start with "RIFF....WAVE": raw PCM */
  HARK_WAV_TRUNCATED,   /* a WAV header that ends before its data chunk */
  HARK_WAV_UNSUPPORTED, /* a WAV, but not 16-bit PCM, mu-law or A-law */
  HARK_WAV_MALFORMED,   /* inconsistent chunk sizes or fields */
} hark_wav_status;

/* True when buf starts with a RIFF/WAVE signature (12 bytes). */
int hark_wav_is_wav(const uint8_t *buf, size_t len);

/*
 * Parses the header at the start of buf. On HARK_WAV_OK fills *info. On
 * any other status writes a one-line reason into err (when errlen > 0).
 * Chunks other than "fmt " and "data" (LIST, fact, ...) are skipped.
 */
hark_wav_status hark_wav_parse(const uint8_t *buf, size_t len, hark_wav_info *info, char *err,
                               size_t errlen);

/* ---- G.711 (telephone audio) --------------------------------------------- */

/* The 16-bit linear sample of one mu-law or A-law byte (ITU-T G.711). */
int16_t hark_audio_mulaw_sample(uint8_t b);
int16_t hark_audio_alaw_sample(uint8_t b);
/* Expands n G.711 bytes into n 16-bit little-endian samples at out (2n
 * bytes; out may not overlap in). */
void hark_audio_mulaw_to_pcm16le(const uint8_t *in, size_t n, uint8_t *out);
void hark_audio_alaw_to_pcm16le(const uint8_t *in, size_t n, uint8_t *out);

/* ---- resampling ------------------------------------------------------------ */

/* The rates a client may name for a stream (a model reads these). */
#define HARK_RESAMPLE_MIN_RATE 8000u
#define HARK_RESAMPLE_MAX_RATE 48000u
/* The rates the resampler itself takes: a recording outside the range above
 * (4 kHz, 96 kHz) is brought into it by the front end that decodes it. */
#define HARK_RESAMPLE_ANY_MIN_RATE 1000u
#define HARK_RESAMPLE_ANY_MAX_RATE 384000u

typedef struct hark_resampler hark_resampler;

/* NULL on failure, with a reason in err. Rates must be within
 * [HARK_RESAMPLE_ANY_MIN_RATE, HARK_RESAMPLE_ANY_MAX_RATE]. Free with
 * hark_resampler_free. */
hark_resampler *hark_resampler_new(uint32_t in_rate, uint32_t out_rate, char *err, size_t errlen);
void hark_resampler_free(hark_resampler *r);

uint32_t hark_resampler_in_rate(const hark_resampler *r);
uint32_t hark_resampler_out_rate(const hark_resampler *r);

/*
 * Resamples n input samples; *out points at the output, *out_n samples,
 * valid until the next call on r (for a passthrough it is `in` itself).
 * Pass in = NULL, n = 0 with flush = 1 at the end of the stream to drain
 * what the filter still holds. Returns 0, or -1 on a soxr error / OOM.
 */
int hark_resampler_process(hark_resampler *r, const int16_t *in, size_t n, int flush,
                           const int16_t **out, size_t *out_n);

/* ---- whole recordings: decoding and channels (libhark_audio_decode) ------- */

/*
 * A recording held in memory decoded with libsndfile: WAV of any sample
 * format (8-bit unsigned, 16/24/32-bit, float, G.711), FLAC, Ogg Opus (at
 * 48 kHz), and whatever else libsndfile reads. Linked into harkd's front
 * ends only (libsndfile stays out of the backends).
 */
#define HARK_AUDIO_MAX_CHANNELS 32u

typedef struct hark_audio_clip {
  float *samples;    /* frames x channels, interleaved, in [-1, 1]; malloc'd */
  size_t frames;     /* samples per channel */
  uint32_t channels; /* 1..HARK_AUDIO_MAX_CHANNELS */
  uint32_t rate;     /* Hz */
} hark_audio_clip;

/* Decodes the file at buf (len bytes). 0 with *clip filled (free with
 * hark_audio_clip_free), or -1 with the client's reason in err ("AUDIO:
 * ..."). max_samples (0: none) bounds frames x channels: a small file that
 * decodes to more is refused. A file with no samples is a clip of 0 frames. */
int hark_audio_clip_decode(const uint8_t *buf, size_t len, size_t max_samples,
                           hark_audio_clip *clip, char *err, size_t errlen);
/* The same from raw interleaved 16-bit little-endian PCM; -1 (err) when len
 * is not whole frames. */
int hark_audio_clip_from_pcm16(const uint8_t *buf, size_t len, uint32_t channels, uint32_t rate,
                               hark_audio_clip *clip, char *err, size_t errlen);
void hark_audio_clip_free(hark_audio_clip *clip);
/* One channel (0-based), or with channel < 0 the mean of all, as 16-bit
 * samples at out_rate (0: the clip's), resampled when it differs. *out is
 * malloc'd, the caller's to free; *out_n samples. -1 (err) on failure. */
int hark_audio_clip_pcm16(const hark_audio_clip *clip, int channel, uint32_t out_rate,
                          int16_t **out, size_t *out_n, char *err, size_t errlen);

/* ---- normaliser: a stream's bytes to 16-bit samples at the model's rate ---- */

/*
 * The first non-empty bytes of a stream may be a WAV file: its header's rate
 * and encoding replace the stream's, and the header is skipped. Otherwise
 * the bytes are the stream's own encoding at its own rate: 16-bit
 * little-endian PCM, or G.711 (one byte a sample). The samples are
 * resampled (hark_resampler, made once the input rate is known: at the
 * first audio, or at the flush of a stream that had none) to out_rate.
 * Every call takes whole samples: a 16-bit stream's odd byte count is an
 * error of that call, not carried to the next.
 */
typedef struct hark_audio_norm hark_audio_norm;

typedef enum hark_audio_norm_status {
  HARK_AUDIO_NORM_OK = 0,
  HARK_AUDIO_NORM_BAD_WAV,   /* a malformed, truncated or unsupported WAV header */
  HARK_AUDIO_NORM_CHANNELS,  /* a WAV of more than one channel */
  HARK_AUDIO_NORM_ODD_BYTES, /* 16-bit PCM bytes that are not whole samples */
  HARK_AUDIO_NORM_BAD_RATE,  /* the input rate is outside the resampler's range */
  HARK_AUDIO_NORM_INTERNAL,  /* out of memory, or the resampler failed */
} hark_audio_norm_status;

/*
 * A normaliser for a stream whose bytes are `encoding` at client_rate (both
 * replaced by a WAV header, if the stream starts with one), to out_rate.
 * Rates are checked when the resampler is made, not here (a WAV header may
 * bring a good rate to a stream whose own is bad). NULL when out of memory.
 * The caller frees it with hark_audio_norm_free.
 */
hark_audio_norm *hark_audio_norm_new(uint32_t client_rate, uint32_t out_rate,
                                     hark_wav_encoding encoding);
void hark_audio_norm_free(hark_audio_norm *a);

/*
 * Looks for a WAV header at *data when no non-empty input has been seen
 * yet; else does nothing. A header sets the input's rate and encoding
 * (and makes the resampler: HARK_AUDIO_NORM_BAD_RATE when its rate is out
 * of range), and *data / *len are advanced past it (the data chunk's
 * bytes, those of a 16-bit PCM one rounded down to whole samples). A
 * failure leaves the next non-empty input to be looked at again. hark_audio_norm_accept
 * calls this itself; call it first only to learn the input's rate or
 * sample width before converting (to bound or slice a long input). On
 * failure writes a one-line reason into err, as the client should read it
 * (e.g. "AUDIO: WAV has 2 channels; only mono is supported").
 */
hark_audio_norm_status hark_audio_norm_begin(hark_audio_norm *a, const uint8_t **data, size_t *len,
                                             char *err, size_t errlen);

/* The input's rate, encoding and bytes per sample (1 for G.711, else 2):
 * the stream's own until a WAV header says otherwise. */
uint32_t hark_audio_norm_in_rate(const hark_audio_norm *a);
uint32_t hark_audio_norm_out_rate(const hark_audio_norm *a);
hark_wav_encoding hark_audio_norm_encoding(const hark_audio_norm *a);
size_t hark_audio_norm_sample_bytes(const hark_audio_norm *a);

/* HARK_AUDIO_NORM_ODD_BYTES (with err) when len bytes of the input are not
 * whole samples: what hark_audio_norm_accept checks first, for a caller
 * that slices a long input and wants the whole of it checked up front. */
hark_audio_norm_status hark_audio_norm_check(const hark_audio_norm *a, size_t len, char *err,
                                             size_t errlen);

/*
 * Converts len bytes (after hark_audio_norm_begin's look for a header) to
 * samples at the output rate: *out, *out_n samples, owned by `a` and valid
 * until its next call (len == 0 without flush gives none). flush != 0: the
 * stream's end; what the resampler still holds comes out too (data may be
 * NULL with len 0). Errors (err as for hark_audio_norm_begin):
 * HARK_AUDIO_NORM_ODD_BYTES ("AUDIO: 3 bytes is not a whole number of
 * 16-bit samples"), HARK_AUDIO_NORM_BAD_RATE (err is the resampler's
 * reason; hark_audio_norm_in_rate says which rate), _INTERNAL; on any
 * error *out_n is 0 and nothing of the call was taken.
 */
hark_audio_norm_status hark_audio_norm_accept(hark_audio_norm *a, const uint8_t *data, size_t len,
                                              int flush, const int16_t **out, size_t *out_n,
                                              char *err, size_t errlen);

/* ---- filter bank: Kaldi log-mel features, streaming ------------------------- */

typedef enum hark_fbank_window {
  HARK_FBANK_POVEY = 0, /* Kaldi's default: a Hann window to the power 0.85 */
  HARK_FBANK_HAMMING,
  HARK_FBANK_HANNING,
  HARK_FBANK_RECTANGULAR,
} hark_fbank_window;

/* Kaldi's FbankOptions (compute-fbank's flags), plus the input's scale. */
typedef struct hark_fbank_opts {
  float sample_rate;         /* 16000 */
  uint32_t num_mel_bins;     /* 80 (Kaldi's default is 23) */
  float frame_length_ms;     /* 25 */
  float frame_shift_ms;      /* 10 */
  float dither;              /* 0: the only value supported (features are deterministic) */
  hark_fbank_window window;  /* HARK_FBANK_POVEY */
  float preemph;             /* 0.97 */
  int remove_dc_offset;      /* 1 */
  float low_freq;            /* 20 Hz */
  float high_freq;           /* -400: <= 0 means the Nyquist frequency plus this */
  int snip_edges;            /* 0: frames centred on every shift, the edges reflected */
  int use_energy;            /* 0; 1 adds the log energy as column 0 (dim = bins + 1) */
  int raw_energy;            /* 1: that energy before pre-emphasis and window */
  float energy_floor;        /* 0 (none) */
  int use_log_fbank;         /* 1 */
  int use_power;             /* 1: power spectrum (else magnitude) */
  int round_to_power_of_two; /* 1: the FFT's size is the frame's rounded up */
  float scale;               /* samples are multiplied by this first: 1 for models
                               * trained on int16-range audio (Kaldi, WeNet), 1/32768
                               * for [-1, 1] (torchaudio.load) */
} hark_fbank_opts;

/* The defaults above (scale 1). */
void hark_fbank_opts_default(hark_fbank_opts *o);

typedef struct hark_fbank_bank hark_fbank_bank;
typedef struct hark_fbank hark_fbank;

/* Checks the options and precomputes what they imply. NULL with a reason in
 * err when they are out of range or memory is short. Free with
 * hark_fbank_bank_free, after every stream made from it. */
hark_fbank_bank *hark_fbank_bank_new(const hark_fbank_opts *o, char *err, size_t errlen);
void hark_fbank_bank_free(hark_fbank_bank *b);
/* Floats per frame: num_mel_bins, plus one with use_energy. */
size_t hark_fbank_bank_dim(const hark_fbank_bank *b);
/* Samples per frame shift and per frame (160 and 400 at the defaults). */
size_t hark_fbank_bank_shift(const hark_fbank_bank *b);
size_t hark_fbank_bank_window(const hark_fbank_bank *b);
/* Frames an offline extractor makes of n samples (snip_edges=0:
 * (n + shift/2) / shift). */
uint64_t hark_fbank_bank_num_frames(const hark_fbank_bank *b, uint64_t n);

/* One stream's extractor on bank b (borrowed: b must outlive it). NULL
 * when out of memory. Free with hark_fbank_free. */
hark_fbank *hark_fbank_new(const hark_fbank_bank *b);
void hark_fbank_free(hark_fbank *f);
/* Back to a fresh stream (a new utterance), keeping its memory. */
void hark_fbank_reset(hark_fbank *f);

/*
 * Feeds n samples (int16, or float in the same units: scale applies to
 * both) and computes every frame whose samples have all arrived. Returns
 * 0, or -1 when out of memory (the samples are not taken) or after
 * hark_fbank_finish. Chunking never changes the features.
 */
int hark_fbank_accept(hark_fbank *f, const int16_t *pcm, size_t n);
int hark_fbank_accept_float(hark_fbank *f, const float *x, size_t n);
/* The end of the stream: computes its last frames (the signal reflected
 * at its end, as Kaldi's offline extractor does). Returns 0, or -1 when out
 * of memory. Further input is refused until hark_fbank_reset. */
int hark_fbank_finish(hark_fbank *f);
int hark_fbank_finished(const hark_fbank *f);

/*
 * Frames are numbered from the stream's start. Computed frames wait in the
 * stream until popped: [hark_fbank_frames_popped, + hark_fbank_frames_ready).
 * hark_fbank_frames points at the first unpopped frame: ready rows of dim
 * floats, contiguous, owned by f and valid until its next accept, finish,
 * pop or reset. hark_fbank_read copies rows [i, i + k) counted from the
 * first unpopped frame (i + k <= ready) into out (k * dim floats) and
 * returns k (fewer when fewer are ready). hark_fbank_pop drops the first n
 * unpopped frames (at most those ready), so a long stream holds only the
 * frames its reader has not consumed.
 */
size_t hark_fbank_frames_ready(const hark_fbank *f);
uint64_t hark_fbank_frames_popped(const hark_fbank *f);
const float *hark_fbank_frames(const hark_fbank *f);
size_t hark_fbank_read(const hark_fbank *f, size_t i, size_t k, float *out);
void hark_fbank_pop(hark_fbank *f, size_t n);

/* ---- VAD gate: utterances from a VAD's speech probabilities ------------- */

/*
 * A neural VAD (silero_vad) gives one speech probability per 32 ms frame;
 * the gate opens an utterance once start_threshold of the last
 * start_history_ms are speech (probability >= speech_threshold) and closes
 * it once stop_threshold of the last stop_history_ms are silence
 * (probability < silence_threshold): Riva's endpointing_config. Pure logic,
 * one per stream; the caller moves the audio (prespeech_ms before the
 * opening window belongs to the utterance).
 */
#define HARK_VAD_FRAME_MS 32u

typedef struct hark_vad_gate_settings {
  float speech_threshold;    /* 0.5 */
  float silence_threshold;   /* 0.35 */
  uint32_t start_history_ms; /* 96 */
  float start_threshold;     /* 0.6 */
  uint32_t stop_history_ms;  /* 512 */
  float stop_threshold;      /* 0.95 */
  uint32_t prespeech_ms;     /* 200 */
} hark_vad_gate_settings;

typedef enum hark_vad_gate_event {
  HARK_VAD_GATE_IDLE = 0, /* outside an utterance */
  HARK_VAD_GATE_OPEN,     /* this frame opens one */
  HARK_VAD_GATE_SPEECH,   /* inside one */
  HARK_VAD_GATE_CLOSE,    /* this frame (the last of its trailing silence) closes it */
} hark_vad_gate_event;

typedef struct hark_vad_gate {
  hark_vad_gate_settings set;
  uint32_t start_window, stop_window; /* frames */
  uint32_t start_need, stop_need;     /* frames of the window that decide */
  uint8_t *start_ring, *stop_ring;    /* speech / silence flags of the windows */
  uint32_t start_pos, stop_pos, start_count, stop_count;
  int in_speech;
  /* probabilities waiting for their audio, q[q_head..q_len) */
  float *q;
  size_t q_head, q_len, q_cap;
} hark_vad_gate;

/* The defaults above (silero's hysteresis, Riva's histories). */
void hark_vad_gate_settings_default(hark_vad_gate_settings *s);
/* 0, or -1 out of memory. Free with hark_vad_gate_fini. */
int hark_vad_gate_init(hark_vad_gate *g, const hark_vad_gate_settings *set);
void hark_vad_gate_fini(hark_vad_gate *g);
/* Back outside an utterance, with empty windows. */
void hark_vad_gate_reset(hark_vad_gate *g);
/* One frame's probability. */
hark_vad_gate_event hark_vad_gate_step(hark_vad_gate *g, float prob);
/*
 * A stream's probabilities arrive in their own input (VAD_PROB), ahead of
 * or behind the audio they judge: they wait in the gate's queue, oldest
 * first, until the recogniser has a frame's audio for the next. queue
 * appends n: 0, -1 when more than max would then wait (nothing is added),
 * -2 out of memory. step_queued steps on the oldest (queued() > 0);
 * queued_probs are the waiting ones, queued() of them. Reset keeps them.
 */
int hark_vad_gate_queue(hark_vad_gate *g, const float *p, size_t n, size_t max);
size_t hark_vad_gate_queued(const hark_vad_gate *g);
const float *hark_vad_gate_queued_probs(const hark_vad_gate *g);
hark_vad_gate_event hark_vad_gate_step_queued(hark_vad_gate *g);

#ifdef __cplusplus
}
#endif
#endif
