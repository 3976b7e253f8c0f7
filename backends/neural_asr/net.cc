/*
 * net.cc — a streaming transducer or CTC model on libtorch (see net.h).
 *
 * Load: the module's parts are found and checked by what they are asked
 * to do — get_init_states at batch 1 and 2 (which also tells each state's
 * batch axis), one encoder call on a chunk of zeros, a decoder and a joiner
 * call (or the CTC head) — so a model that does not fit the contract fails
 * to load with the part, what was expected and what it gave.
 *
 * A round (asr_net_step): the streams' chunks are stacked into one
 * [N, T, C] call; each state tensor is the concatenation of the streams'
 * along its batch axis, and the new states are cut back along it, each
 * stream's a copy of its own (so no stream keeps a round's batch alive).
 * Greedy search then runs across the round's streams: one joiner call per
 * encoder frame for all of them, a decoder call only for the streams that
 * emitted at that frame. The joiner's projections are applied once per
 * chunk and per decoder call (as sherpa does) when the joiner has them.
 * Nothing of a stream changes until the whole round succeeded.
 *
 * No exception leaves this file: every entry point catches and reports.
 */
#include "net.h"

#include "hark/backend.h"

#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/library.h>
#include <torch/script.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

struct asr_net {
  std::string label;
  asr_net_opts o{};
  asr_net_info info{};
  bool xnnpack_tried = false; /* the load put (or began to put) layers on XNNPACK */
  torch::jit::Module module, encoder, decoder, joiner, ctc;
  bool has_proj = false;        /* joiner.encoder_proj / decoder_proj used apart */
  size_t joiner_args = 3;       /* joiner.forward's arguments after self */
  size_t decoder_args = 2;      /* decoder.forward's */
  std::vector<int64_t> axes;    /* each state's batch axis */
  std::vector<int64_t> widths;  /* its size per stream on that axis */
  std::vector<at::Tensor> init; /* one stream's initial states */
  at::Tensor init_dec;          /* decoder output for the blank context, [1, J] */
};

/* One hypothesis of an utterance: its tokens with the encoder frame (from
 * the stream's start) and probability of each, its log probability, and
 * what its search needs next. */
struct hyp {
  std::vector<int32_t> ys;
  std::vector<uint64_t> frames;
  std::vector<uint64_t> ends; /* the last frame each token held (CTC greedy: its repeats) */
  std::vector<float> probs;
  double logp = 0;
  at::Tensor dec;         /* transducer: the decoder's output for ys, [1, J] */
  double pb = 0;          /* CTC beam: log P(ys, ending in blank) */
  double pnb = -INFINITY; /* CTC beam: log P(ys, ending in its last token) */
  int64_t last = -1;      /* CTC greedy: the previous frame's best token */
};

struct asr_net_stream {
  asr_net *net;
  std::vector<at::Tensor> states;
  uint64_t frames = 0;   /* encoder frames recognised */
  std::vector<hyp> hyps; /* the open utterance's, best first */
};

/* libtorch's switch (thread-local) that keeps XNNPACK off its process-wide
 * thread pool: with it on, a call runs on the calling thread alone, as
 * OpenMP does at one intra-op thread (without it, the pool's own threads
 * took as much CPU as the round threads). libtorch 1.13 exports it; its
 * header (caffe2/utils/threadpool/pthreadpool-cpp.h) is not in Debian's
 * libtorch-dev. */
namespace caffe2 {
class _NoPThreadPoolGuard {
 public:
  static bool is_enabled();
  static void set_enabled(bool);
};
} // namespace caffe2

namespace {

struct failure : std::runtime_error {
  explicit failure(const std::string &m) : std::runtime_error(m) {}
};

void put_err(char *err, size_t errlen, const std::string &msg) {
  if (errlen) snprintf(err, errlen, "%s", msg.c_str());
}

std::string shape_of(const at::Tensor &t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); d++) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

c10::optional<torch::jit::Module> child(const torch::jit::Module &m, const char *name) {
  if (!m.hasattr(name)) return c10::nullopt;
  c10::IValue v = m.attr(name);
  if (!v.isModule()) return c10::nullopt;
  return v.toModule();
}

torch::jit::Module part(const asr_net &n, const char *name, bool required) {
  auto m = child(n.module, name);
  if (!m) {
    if (required)
      throw failure(n.label + ": " + n.o.file + " has no submodule '" + name +
                    "' (the contract: docs/neural-asr.md)");
    return torch::jit::Module();
  }
  return *m;
}

size_t forward_args(const torch::jit::Module &m) {
  auto f = m.find_method("forward");
  return f ? f->function().getSchema().arguments().size() - 1 : 0;
}

at::Tensor as_tensor(const c10::IValue &v, const std::string &what) {
  if (!v.isTensor()) throw failure(what + " is not a tensor (" + v.tagKind() + ")");
  return v.toTensor();
}

std::vector<at::Tensor> tensor_list(const c10::IValue &v, const std::string &what) {
  std::vector<at::Tensor> out;
  if (v.isTensorList()) {
    for (const at::Tensor &t : v.toTensorVector()) out.push_back(t);
  } else if (v.isList()) {
    for (const c10::IValue &e : v.toListRef()) out.push_back(as_tensor(e, what + "'s element"));
  } else if (v.isTuple()) {
    for (const c10::IValue &e : v.toTupleRef().elements())
      out.push_back(as_tensor(e, what + "'s element"));
  } else {
    throw failure(what + " is not a list of tensors (" + v.tagKind() + ")");
  }
  return out;
}

std::vector<at::Tensor> init_states(asr_net &n, int64_t batch) {
  auto m = n.encoder.find_method("get_init_states");
  if (!m)
    throw failure(n.label +
                  ": encoder has no method get_init_states(batch_size, device) "
                  "(export it with @torch.jit.export)");
  size_t nargs = m->function().getSchema().arguments().size() - 1;
  std::vector<c10::IValue> args;
  if (nargs < 1 || nargs > 2)
    throw failure(n.label + ": encoder.get_init_states takes " + std::to_string(nargs) +
                  " arguments; the contract is get_init_states(batch_size: int, device)");
  args.emplace_back(batch);
  if (nargs == 2) args.emplace_back(c10::Device(c10::kCPU));
  return tensor_list((*m)(args),
                     n.label + ": encoder.get_init_states(" + std::to_string(batch) + ")");
}

/* Each state's batch axis: the one axis whose size differs between a
 * batch of 1 and a batch of 2 (and doubles). */
void discover_axes(asr_net &n) {
  std::vector<at::Tensor> one = init_states(n, 1), two = init_states(n, 2);
  if (one.size() != two.size() || one.empty())
    throw failure(n.label + ": encoder.get_init_states gives " + std::to_string(one.size()) +
                  " states for batch 1 and " + std::to_string(two.size()) + " for batch 2");
  for (size_t i = 0; i < one.size(); i++) {
    const at::Tensor &a = one[i], &b = two[i];
    std::string which = n.label + ": state " + std::to_string(i) + " (" + shape_of(a) +
                        " for batch 1, " + shape_of(b) + " for batch 2)";
    if (a.dim() != b.dim() || a.dim() == 0)
      throw failure(which + " cannot batch: its rank changes or it has no axis");
    int64_t axis = -1;
    for (int64_t d = 0; d < a.dim(); d++) {
      if (a.size(d) == b.size(d)) continue;
      if (axis >= 0) throw failure(which + " cannot batch: more than one axis changes");
      axis = d;
    }
    if (axis < 0 || b.size(axis) != 2 * a.size(axis))
      throw failure(which + " cannot batch: no axis grows with the batch");
    if (a.scalar_type() != b.scalar_type())
      throw failure(which + " cannot batch: its type changes");
    n.axes.push_back(axis);
    n.widths.push_back(a.size(axis));
    n.init.push_back(a.clone(at::MemoryFormat::Contiguous));
    n.info.state_bytes += a.nbytes();
  }
  n.info.n_states = (uint32_t)one.size();
}

at::Tensor run_decoder(asr_net &n, const at::Tensor &y) {
  std::vector<c10::IValue> args{y};
  if (n.decoder_args >= 2) args.emplace_back(false); /* need_pad: the context is whole */
  at::Tensor d = as_tensor(n.decoder.forward(args), n.label + ": decoder's output");
  if (d.dim() == 3) d = d.squeeze(1);
  if (d.dim() != 2 || d.size(0) != y.size(0))
    throw failure(n.label + ": decoder gave " + shape_of(d) + " for " + shape_of(y) +
                  "; expected [N, 1, D] or [N, D]");
  if (n.has_proj) d = n.joiner.attr("decoder_proj").toModule().forward({d}).toTensor();
  return d;
}

at::Tensor project_encoder(asr_net &n, const at::Tensor &enc) {
  if (!n.has_proj) return enc;
  return n.joiner.attr("encoder_proj").toModule().forward({enc}).toTensor();
}

at::Tensor run_joiner(asr_net &n, const at::Tensor &enc, const at::Tensor &dec) {
  std::vector<c10::IValue> args{enc, dec};
  if (n.joiner_args >= 3) args.emplace_back(!n.has_proj);
  at::Tensor l = as_tensor(n.joiner.forward(args), n.label + ": joiner's output");
  if (l.dim() != 2 || l.size(0) != enc.size(0))
    throw failure(n.label + ": joiner gave " + shape_of(l) + "; expected [N, vocabulary]");
  return l;
}

at::Tensor context_tensor(const std::vector<const std::vector<int64_t> *> &ctxs) {
  int64_t c = (int64_t)ctxs[0]->size();
  at::Tensor y = torch::empty({(int64_t)ctxs.size(), c}, torch::kLong);
  int64_t *p = y.data_ptr<int64_t>();
  for (size_t i = 0; i < ctxs.size(); i++) memcpy(p + i * c, ctxs[i]->data(), c * sizeof *p);
  return y;
}

/* The encoder's input in the precision it runs in. */
at::Tensor encoder_input(const asr_net &n, const at::Tensor &x) {
  return n.o.precision == ASR_BF16 ? x.to(torch::kBFloat16) : x;
}

/* The encoder on n chunks at once. Each stream's new states are copied
 * into the tensors it already holds, which are its own (made at its start):
 * a round then allocates nothing per stream for them, where a fresh copy of
 * every state for every stream (32 tensors, 0.5 MB a stream on the 20m
 * model) was freed a round later, on whichever round thread ran it next. A
 * failure part-way leaves the round's streams half-updated; every stream in
 * a failed round is failed and dropped. */
at::Tensor encode(asr_net &n, asr_net_stream **ss, const float *const *feats, uint32_t count) {
  int64_t T = n.o.chunk_frames + n.o.pad_frames, C = n.o.feature_dim;
  at::Tensor x = torch::empty({(int64_t)count, T, C}, torch::kFloat);
  float *px = x.data_ptr<float>();
  for (uint32_t i = 0; i < count; i++) memcpy(px + i * T * C, feats[i], T * C * sizeof(float));
  at::Tensor lens = torch::full({(int64_t)count}, T, torch::kLong);
  c10::List<at::Tensor> states;
  for (size_t k = 0; k < n.init.size(); k++) {
    if (count == 1) {
      states.push_back(ss[0]->states[k]);
      continue;
    }
    std::vector<at::Tensor> parts;
    parts.reserve(count);
    for (uint32_t i = 0; i < count; i++) parts.push_back(ss[i]->states[k]);
    states.push_back(torch::cat(parts, n.axes[k]));
  }
  c10::IValue r = n.encoder.forward({encoder_input(n, x), lens, states});
  if (!r.isTuple() || r.toTupleRef().elements().size() != 3)
    throw failure(n.label + ": encoder must return (encoder_out, encoder_out_lens, states)");
  const auto &el = r.toTupleRef().elements();
  at::Tensor out = as_tensor(el[0], n.label + ": encoder_out").to(torch::kFloat);
  std::vector<at::Tensor> ns = tensor_list(el[2], n.label + ": encoder's new states");
  if (out.dim() != 3 || out.size(0) != count || out.size(1) != n.info.out_frames)
    throw failure(n.label + ": encoder gave " + shape_of(out) + " for " + std::to_string(count) +
                  " chunks; expected [" + std::to_string(count) + ", " +
                  std::to_string(n.info.out_frames) + ", D]");
  if (ns.size() != n.init.size())
    throw failure(n.label + ": encoder returned " + std::to_string(ns.size()) + " states, not " +
                  std::to_string(n.init.size()));
  for (size_t k = 0; k < ns.size(); k++) {
    int64_t ax = n.axes[k], w = n.widths[k];
    if (ns[k].dim() != n.init[k].dim() || ns[k].size(ax) != w * (int64_t)count)
      throw failure(n.label + ": encoder's new state " + std::to_string(k) + " is " +
                    shape_of(ns[k]) + " for " + std::to_string(count) + " streams");
  }
  for (size_t k = 0; k < ns.size(); k++) {
    int64_t ax = n.axes[k], w = n.widths[k];
    for (uint32_t i = 0; i < count; i++) {
      at::Tensor src = ns[k].narrow(ax, (int64_t)i * w, w);
      at::Tensor &dst = ss[i]->states[k];
      /* A state of another shape or type than the stream holds, or one the
       * encoder made out of the stream's own (a single stream's states go
       * in uncopied), is taken as a copy of its own instead. */
      if (src.sizes() == dst.sizes() && src.scalar_type() == dst.scalar_type() &&
          !src.is_alias_of(dst))
        dst.copy_(src);
      else
        dst = src.clone(at::MemoryFormat::Contiguous);
    }
  }
  return out;
}

/* ---- search ------------------------------------------------------------------- */

double log_add(double a, double b) {
  if (a == -INFINITY) return b;
  if (b == -INFINITY) return a;
  double m = std::max(a, b);
  return m + std::log1p(std::exp(-std::fabs(a - b)));
}

/* A hypothesis extended by token y at frame `frame` with probability p. */
hyp extended(const hyp &h, int64_t y, uint64_t frame, float p) {
  hyp e = h;
  e.ys.push_back((int32_t)y);
  e.frames.push_back(frame);
  e.ends.push_back(frame);
  e.probs.push_back(p);
  return e;
}

/* An utterance's first context, as icefall and sherpa start it:
 * [-1, ..., -1, blank]. icefall's decoder gives -1 a zero embedding, which
 * is what it trained on (its decoder pads the left of the first blank with
 * zeros); blanks there instead would shift the first tokens. */
std::vector<int64_t> start_context(const asr_net &n) {
  std::vector<int64_t> c(n.info.context_size, -1);
  c.back() = n.info.blank_id;
  return c;
}

/* The decoder's context for h: the last context_size tokens of the start
 * context followed by h's tokens (icefall's hyp[-context_size:]). */
std::vector<int64_t> context_of(const asr_net &n, const hyp &h) {
  std::vector<int64_t> c = start_context(n);
  size_t C = c.size(), k = std::min(h.ys.size(), C);
  /* the start context's last C - k, then h's last k */
  std::copy(c.begin() + (ptrdiff_t)k, c.end(), c.begin());
  for (size_t i = 0; i < k; i++) c[C - k + i] = h.ys[h.ys.size() - k + i];
  return c;
}

/* Decoder outputs for the hypotheses that need one (dec undefined), in one call. */
void fill_decoder(asr_net &n, std::vector<hyp *> &need) {
  if (need.empty()) return;
  std::vector<std::vector<int64_t>> ctx;
  std::vector<const std::vector<int64_t> *> ptrs;
  ctx.reserve(need.size());
  for (hyp *h : need) ctx.push_back(context_of(n, *h));
  for (auto &c : ctx) ptrs.push_back(&c);
  at::Tensor d = run_decoder(n, context_tensor(ptrs));
  for (size_t i = 0; i < need.size(); i++) need[i]->dec = d.narrow(0, (int64_t)i, 1);
}

void check_vocab(const asr_net &n, int64_t v, const char *what) {
  if (v != n.o.vocab_size)
    throw failure(n.label + ": " + what + " gives " + std::to_string(v) +
                  " logits, tokens.txt has " + std::to_string(n.o.vocab_size) + " tokens");
}

/* Greedy search for every stream of the round: one joiner call a frame,
 * the decoder only for the streams that emitted. */
void greedy_transducer(asr_net &n, asr_net_stream **ss, uint32_t count, const at::Tensor &enc_out,
                       std::vector<std::vector<hyp>> &next) {
  at::Tensor enc = project_encoder(n, enc_out);
  next.assign(count, {});
  std::vector<at::Tensor> decs;
  for (uint32_t i = 0; i < count; i++) {
    next[i].push_back(ss[i]->hyps[0]);
    decs.push_back(ss[i]->hyps[0].dec);
  }
  at::Tensor dec = count == 1 ? decs[0] : torch::cat(decs, 0);
  for (uint32_t t = 0; t < n.info.out_frames; t++) {
    at::Tensor logits = run_joiner(n, enc.select(1, t), dec);
    check_vocab(n, logits.size(1), "joiner");
    at::Tensor best = logits.argmax(1);
    const int64_t *b = best.data_ptr<int64_t>();
    std::vector<int64_t> rows;
    for (uint32_t i = 0; i < count; i++)
      if (b[i] != n.info.blank_id) rows.push_back(i);
    if (rows.empty()) continue;
    at::Tensor prob = logits.softmax(1);
    std::vector<hyp *> need;
    for (int64_t i : rows) {
      hyp &h = next[i][0];
      h = extended(h, b[i], ss[i]->frames + t, prob[i][b[i]].item<float>());
      h.dec = at::Tensor();
      need.push_back(&h);
    }
    fill_decoder(n, need);
    if (count == 1) {
      dec = next[0][0].dec;
    } else {
      std::vector<at::Tensor> d;
      for (hyp *h : need) d.push_back(h->dec);
      if (dec.data_ptr() == decs[0].data_ptr()) dec = dec.clone();
      dec.index_copy_(0, torch::tensor(rows, torch::kLong), torch::cat(d, 0));
    }
  }
  for (uint32_t i = 0; i < count; i++) next[i][0].dec = next[i][0].dec.clone();
}

/* icefall's modified beam search (at most one token a frame), across the
 * round's streams: each frame one joiner call for every hypothesis of
 * every stream, the best `beam` continuations of each stream kept (equal
 * token sequences merged), one decoder call for those that emitted. */
void beam_transducer(asr_net &n, asr_net_stream **ss, uint32_t count, const at::Tensor &enc_out,
                     std::vector<std::vector<hyp>> &next) {
  at::Tensor enc = project_encoder(n, enc_out);
  int64_t beam = n.o.beam, V = n.o.vocab_size;
  next.assign(count, {});
  for (uint32_t i = 0; i < count; i++) next[i] = ss[i]->hyps;
  for (uint32_t t = 0; t < n.info.out_frames; t++) {
    std::vector<at::Tensor> decs;
    std::vector<int64_t> stream_of, slot; /* each row: its stream, its place in [N, beam] */
    for (uint32_t i = 0; i < count; i++)
      for (size_t h = 0; h < next[i].size(); h++) {
        decs.push_back(next[i][h].dec);
        stream_of.push_back(i);
        slot.push_back((int64_t)i * beam + (int64_t)h);
      }
    at::Tensor rows_enc = enc.select(1, t).index_select(0, torch::tensor(stream_of, torch::kLong));
    at::Tensor logp = run_joiner(n, rows_enc, torch::cat(decs, 0)).log_softmax(1);
    check_vocab(n, logp.size(1), "joiner");
    std::vector<double> base;
    for (uint32_t i = 0; i < count; i++)
      for (const hyp &h : next[i]) base.push_back(h.logp);
    at::Tensor scores = logp + torch::tensor(base, torch::kDouble).to(torch::kFloat).unsqueeze(1);
    at::Tensor all = torch::full({(int64_t)count * beam, V}, -INFINITY);
    all.index_copy_(0, torch::tensor(slot, torch::kLong), scores);
    auto top = all.view({(int64_t)count, beam * V}).topk(beam, 1);
    at::Tensor tv = std::get<0>(top).contiguous(), ti = std::get<1>(top).contiguous();
    const float *pv = tv.data_ptr<float>();
    const int64_t *pi = ti.data_ptr<int64_t>();
    at::Tensor lp = logp.contiguous();
    const float *plp = lp.data_ptr<float>();
    std::vector<int64_t> row_of_slot((size_t)count * beam, -1);
    for (size_t r = 0; r < slot.size(); r++) row_of_slot[slot[r]] = (int64_t)r;
    std::vector<std::vector<hyp>> cur(count);
    std::vector<hyp *> need;
    for (uint32_t i = 0; i < count; i++) {
      for (int64_t k = 0; k < beam; k++) {
        float sc = pv[i * beam + k];
        if (sc == -INFINITY) continue;
        int64_t flat = pi[i * beam + k], h = flat / V, y = flat % V;
        const hyp &src = next[i][h];
        hyp e = y == n.info.blank_id ? src
                                     : extended(src, y, ss[i]->frames + t,
                                                std::exp(plp[row_of_slot[i * beam + h] * V + y]));
        e.logp = sc;
        bool merged = false;
        for (hyp &o : cur[i])
          if (o.ys == e.ys) {
            o.logp = log_add(o.logp, e.logp);
            merged = true;
            break;
          }
        if (merged) continue;
        if (y != n.info.blank_id) e.dec = at::Tensor();
        cur[i].push_back(std::move(e));
      }
      std::stable_sort(cur[i].begin(), cur[i].end(),
                       [](const hyp &a, const hyp &b) { return a.logp > b.logp; });
    }
    for (auto &c : cur)
      for (hyp &h : c)
        if (!h.dec.defined()) need.push_back(&h);
    fill_decoder(n, need);
    next.swap(cur);
  }
  for (auto &v : next)
    for (hyp &h : v) h.dec = h.dec.clone();
}

at::Tensor ctc_log_probs(asr_net &n, uint32_t count, const at::Tensor &enc_out) {
  at::Tensor lp = as_tensor(n.ctc.forward({enc_out}), n.label + ": ctc_output's output");
  if (lp.dim() != 3 || lp.size(0) != count || lp.size(1) != n.info.out_frames)
    throw failure(n.label + ": ctc_output gave " + shape_of(lp) + "; expected [N, T', vocab]");
  check_vocab(n, lp.size(2), "ctc_output");
  return lp.contiguous();
}

/* CTC greedy: each frame's best token, repeats merged, blanks dropped; a
 * token's frame is its first. */
void greedy_ctc(asr_net &n, asr_net_stream **ss, uint32_t count, const at::Tensor &enc_out,
                std::vector<std::vector<hyp>> &next) {
  at::Tensor lp = ctc_log_probs(n, count, enc_out);
  auto mx = lp.max(2);
  at::Tensor best = std::get<1>(mx).contiguous(), score = std::get<0>(mx).exp().contiguous();
  const int64_t *b = best.data_ptr<int64_t>();
  const float *p = score.data_ptr<float>();
  int64_t T = n.info.out_frames;
  next.assign(count, {});
  for (uint32_t i = 0; i < count; i++) {
    hyp h = ss[i]->hyps[0];
    for (int64_t t = 0; t < T; t++) {
      int64_t y = b[i * T + t];
      if (y != n.info.blank_id && y != h.last)
        h = extended(h, y, ss[i]->frames + t, p[i * T + t]);
      else if (y != n.info.blank_id && !h.ends.empty())
        h.ends.back() = ss[i]->frames + t; /* the token goes on */
      h.last = y;
    }
    next[i].push_back(std::move(h));
  }
}

/* CTC prefix beam search, each stream on its own (the network's work is
 * the batched call before it): a prefix's probability ending in blank
 * (pb) and in its last token (pnb); the `beam` most likely kept. */
void beam_ctc(asr_net &n, asr_net_stream **ss, uint32_t count, const at::Tensor &enc_out,
              std::vector<std::vector<hyp>> &next) {
  at::Tensor lp = ctc_log_probs(n, count, enc_out);
  int64_t T = n.info.out_frames, V = n.o.vocab_size, beam = n.o.beam, blank = n.info.blank_id;
  auto top = lp.topk(std::min<int64_t>(beam, V), 2);
  at::Tensor ti = std::get<1>(top).contiguous();
  const int64_t *pi = ti.data_ptr<int64_t>();
  const float *pl = lp.data_ptr<float>();
  int64_t K = ti.size(2);
  next.assign(count, {});
  for (uint32_t i = 0; i < count; i++) {
    std::vector<hyp> cur = ss[i]->hyps;
    for (int64_t t = 0; t < T; t++) {
      const float *row = pl + (i * T + t) * V;
      std::vector<hyp> out;
      auto find = [&](const std::vector<int32_t> &ys) -> hyp * {
        for (hyp &o : out)
          if (o.ys == ys) return &o;
        return nullptr;
      };
      auto put = [&](const hyp &like, double pb, double pnb) {
        hyp *o = find(like.ys);
        if (!o) {
          out.push_back(like);
          o = &out.back();
          o->pb = o->pnb = -INFINITY;
        }
        o->pb = log_add(o->pb, pb);
        o->pnb = log_add(o->pnb, pnb);
      };
      for (const hyp &h : cur) {
        double tot = log_add(h.pb, h.pnb);
        put(h, tot + row[blank], -INFINITY);
        for (int64_t k = 0; k < K; k++) {
          int64_t c = pi[(i * T + t) * K + k];
          if (c == blank) continue;
          double p = row[c];
          if (!h.ys.empty() && c == h.ys.back()) {
            put(h, -INFINITY, h.pnb + p); /* the same token, not repeated */
            put(extended(h, c, ss[i]->frames + t, (float)std::exp(p)), -INFINITY, h.pb + p);
          } else {
            put(extended(h, c, ss[i]->frames + t, (float)std::exp(p)), -INFINITY, tot + p);
          }
        }
      }
      for (hyp &o : out) o.logp = log_add(o.pb, o.pnb);
      std::stable_sort(out.begin(), out.end(),
                       [](const hyp &a, const hyp &b) { return a.logp > b.logp; });
      if ((int64_t)out.size() > beam) out.resize(beam);
      cur.swap(out);
    }
    next[i] = std::move(cur);
  }
}

void search(asr_net &n, asr_net_stream **ss, uint32_t count, const at::Tensor &enc,
            std::vector<std::vector<hyp>> &next) {
  bool beam = n.o.search == ASR_BEAM;
  if (n.info.family == ASR_CTC)
    beam ? beam_ctc(n, ss, count, enc, next) : greedy_ctc(n, ss, count, enc, next);
  else
    beam ? beam_transducer(n, ss, count, enc, next) : greedy_transducer(n, ss, count, enc, next);
}

/* A fresh utterance's one hypothesis. */
hyp start_hyp(const asr_net &n) {
  hyp h;
  h.dec = n.init_dec;
  h.logp = 0;
  h.pb = 0;
  h.pnb = -INFINITY;
  return h;
}

void dry_run(asr_net &n) {
  int64_t T = n.o.chunk_frames + n.o.pad_frames;
  at::Tensor x = torch::zeros({1, T, (int64_t)n.o.feature_dim});
  c10::List<at::Tensor> st;
  for (auto &t : n.init) st.push_back(t);
  c10::IValue r;
  try {
    r = n.encoder.forward({encoder_input(n, x), torch::full({1}, T, torch::kLong), st});
  } catch (const std::exception &e) {
    const c10::Error *ce = dynamic_cast<const c10::Error *>(&e);
    std::string why = ce ? ce->what_without_backtrace() : e.what();
    size_t end = why.find_last_not_of(" \n");
    size_t start = end == std::string::npos ? 0 : why.rfind('\n', end);
    if (start != std::string::npos && end != std::string::npos)
      why = why.substr(start + 1, end - start); /* a TorchScript traceback's last line */
    throw failure(n.label + ": encoder(features [1, " + std::to_string(T) + ", " +
                  std::to_string(n.o.feature_dim) + "], lengths, states) failed: " + why +
                  " (decode_chunk_len " + std::to_string(n.o.chunk_frames) + " + pad_length " +
                  std::to_string(n.o.pad_frames) + " frames of " + std::to_string(n.o.feature_dim) +
                  " features)");
  }
  if (!r.isTuple() || r.toTupleRef().elements().size() != 3)
    throw failure(n.label + ": encoder must return (encoder_out, encoder_out_lens, states)");
  at::Tensor out = as_tensor(r.toTupleRef().elements()[0], n.label + ": encoder_out");
  if (out.dim() != 3 || out.size(0) != 1 || out.size(1) < 1)
    throw failure(n.label + ": encoder_out is " + shape_of(out) + "; expected [N, T', D]");
  n.info.out_frames = (uint32_t)out.size(1);
  /* Then a whole step, search included, on a stream of its own. */
  asr_net_stream s;
  s.net = &n;
  for (const at::Tensor &t : n.init) s.states.push_back(t.clone()); /* encode writes them */
  s.hyps.push_back(start_hyp(n));
  asr_net_stream *ss = &s;
  std::vector<float> zeros((size_t)T * n.o.feature_dim, 0.0f);
  const float *f = zeros.data();
  std::vector<std::vector<hyp>> hyps;
  search(n, &ss, 1, encode(n, &ss, &f, 1), hyps);
}

/* The chunking: the config's, or the encoder's own decode_chunk_len and
 * pad_length (icefall's export has them); a config that differs from the
 * module's fails. */
void chunking(asr_net &n) {
  const char *names[2] = {"decode_chunk_len", "pad_length"};
  uint32_t *vals[2] = {&n.o.chunk_frames, &n.o.pad_frames};
  for (int i = 0; i < 2; i++) {
    if (!n.encoder.hasattr(names[i]) || !n.encoder.attr(names[i]).isInt()) continue;
    int64_t v = n.encoder.attr(names[i]).toInt();
    if (!n.o.chunk_given && v > 0 && v <= 10000)
      *vals[i] = (uint32_t)v;
    else if (n.o.chunk_given && v != *vals[i])
      throw failure(n.label + ": parameter " + names[i] + " is " + std::to_string(*vals[i]) +
                    " but the encoder's " + names[i] + " is " + std::to_string(v));
  }
  n.info.chunk_frames = n.o.chunk_frames;
  n.info.pad_frames = n.o.pad_frames;
}

/* ---- precision ------------------------------------------------------------ */

const char *precision_name(asr_precision p) {
  return p == ASR_INT8 ? "int8" : p == ASR_BF16 ? "bf16" : "fp32";
}

/* Whether /proc/cpuinfo's flags name `flag`. */
bool cpu_has(const std::string &flag) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.compare(0, 5, "flags") != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string w;
    while (words >> w)
      if (w == flag) return true;
    return false;
  }
  return false;
}

/* The module attribute a graph value reads: a chain of prim::GetAttr from
 * the method's self, followed on the module's object; none when the value
 * is anything else. */
c10::optional<c10::IValue> attr_value(const torch::jit::Module &m, const torch::jit::Graph &g,
                                      torch::jit::Value *v) {
  std::vector<std::string> names;
  while (v->node()->kind() == c10::prim::GetAttr) {
    names.push_back(v->node()->s(c10::attr::name));
    v = v->node()->input(0);
  }
  if (v != g.inputs().at(0)) return c10::nullopt;
  c10::IValue cur = m._ivalue();
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    if (!cur.isObject()) return c10::nullopt;
    cur = cur.toObjectRef().getAttr(*it);
  }
  return cur;
}

void collect_linears(torch::jit::Block *b, std::vector<torch::jit::Node *> &out) {
  for (torch::jit::Node *node : b->nodes()) {
    if (node->kind() == c10::aten::linear && node->inputs().size() == 3) out.push_back(node);
    for (torch::jit::Block *sub : node->blocks()) collect_linears(sub, out);
  }
}

/* An FP32 weight [out, in] as int8 per output channel (symmetric), and its
 * bias, prepacked for quantized::linear_dynamic by the engine in force. */
c10::IValue prepack(const at::Tensor &w, const c10::optional<at::Tensor> &b) {
  at::Tensor wf = w.to(torch::kFloat).contiguous();
  at::Tensor scale = wf.abs().amax(1).clamp_min(1e-8).div(127.0).to(torch::kDouble);
  at::Tensor zero = torch::zeros({wf.size(0)}, torch::kLong);
  at::Tensor q = at::quantize_per_channel(wf, scale, zero, 0, torch::kQInt8);
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("quantized::linear_prepack", "");
  torch::jit::Stack st{q,
                       b ? c10::IValue(b->detach().to(torch::kFloat).contiguous()) : c10::IValue()};
  op.callBoxed(&st);
  return st.at(0);
}

/* Method `method` of m with its calls inlined and every aten::linear whose
 * weight (and bias) are m's own attributes replaced by what `make` inserts
 * in its place (before the node; the node, its weight and bias given; a
 * null from `make` leaves the node). The method's graph is m's type's own
 * (a submodule's, shared by every instance of its type, is copied in by
 * the inlining, never changed). How many were replaced. */
template <typename F>
uint32_t rewrite_linears(torch::jit::Module &m, const char *method, F &&make) {
  auto meth = m.find_method(method);
  if (!meth) return 0;
  std::shared_ptr<torch::jit::Graph> g = torch::jit::toGraphFunction(meth->function()).graph();
  torch::jit::Inline(*g);
  std::vector<torch::jit::Node *> linears;
  collect_linears(g->block(), linears);
  uint32_t done = 0;
  for (torch::jit::Node *node : linears) {
    auto w = attr_value(m, *g, node->input(1));
    if (!w || !w->isTensor() || w->toTensor().dim() != 2 || !w->toTensor().is_floating_point())
      continue;
    c10::optional<at::Tensor> bias;
    if (node->input(2)->type()->kind() != c10::TypeKind::NoneType) {
      auto b = attr_value(m, *g, node->input(2));
      if (!b) continue;
      if (b->isTensor())
        bias = b->toTensor();
      else if (!b->isNone())
        continue;
    }
    torch::jit::WithInsertPoint here(node);
    torch::jit::Value *y = make(*g, node, w->toTensor(), bias);
    if (!y) continue; /* `make` leaves this one */
    node->output()->replaceAllUsesWith(y);
    node->destroy();
    done++;
  }
  torch::jit::EliminateDeadCode(g);
  return done;
}

/* quantized::linear_dynamic on a prepacked int8 constant. */
uint32_t quantise_method(torch::jit::Module &m, const char *method) {
  return rewrite_linears(m, method,
                         [](torch::jit::Graph &g, torch::jit::Node *linear, const at::Tensor &w,
                            const c10::optional<at::Tensor> &b) {
                           torch::jit::Value *p = g.insertConstant(prepack(w, b));
                           return g.insert(c10::Symbol::fromQualString("quantized::linear_dynamic"),
                                           {linear->input(0), p, false});
                         });
}

/* XNNPACK's FP32 GEMM (prepacked::linear_clamp_run) on weights packed
 * once, at load, in place of aten::linear, which hands them to libtorch's
 * BLAS (Debian's OpenBLAS) to be packed again on every call: its
 * sgemm_incopy was 15% of the round threads' time, and XNNPACK took a
 * quarter less of it at 150 streams (bench/RESULTS.md, 2026-11-28 night). A packed
 * layer keeps each call's sizes and pointers in itself between its setup
 * and its run, so two threads in one layer at once corrupt each other's
 * output (tried: 310 wrong results in 1000 calls from two threads): each
 * layer runs under a lock of its own (one of XNN_LOCKS, by the layer's
 * index), taken only for that layer. Two round threads in one encoder then
 * wait for each other only when both reach the same layer together.
 * (oneDNN, thread-safe, was slower than OpenBLAS in harkd: its layout
 * conversions around each call.) */
constexpr size_t XNN_LOCKS = 256;
std::mutex xnn_locks[XNN_LOCKS];

void xnn_linear(const c10::OperatorHandle &, torch::jit::Stack *st) {
  static const c10::OperatorHandle run =
      c10::Dispatcher::singleton().findSchemaOrThrow("prepacked::linear_clamp_run", "");
  int64_t slot = st->back().toInt();
  st->pop_back(); /* x, packed: linear_clamp_run's own arguments */
  std::lock_guard<std::mutex> hold(xnn_locks[(size_t)slot % XNN_LOCKS]);
  run.callBoxed(st);
}

uint32_t xnnpack_method(torch::jit::Module &m, const char *method) {
  static const c10::OperatorHandle prepack_op =
      c10::Dispatcher::singleton().findSchemaOrThrow("prepacked::linear_clamp_prepack", "");
  static std::atomic<int64_t> next_slot{0};
  return rewrite_linears(
      m, method,
      [](torch::jit::Graph &g, torch::jit::Node *linear, const at::Tensor &w,
         const c10::optional<at::Tensor> &b) -> torch::jit::Value * {
        /* XNNPACK's GEMM is FP32's: a layer in another type keeps BLAS */
        if (w.scalar_type() != torch::kFloat || (b && b->scalar_type() != torch::kFloat))
          return nullptr;
        torch::jit::Stack st{
            w.detach().to(torch::kFloat).contiguous(),
            b ? c10::IValue(b->detach().to(torch::kFloat).contiguous()) : c10::IValue(),
            c10::IValue(), c10::IValue()};
        prepack_op.callBoxed(&st);
        torch::jit::Value *p = g.insertConstant(st.at(0));
        torch::jit::Value *slot = g.insertConstant(next_slot++);
        return g.insert(c10::Symbol::fromQualString("hark_asr::xnn_linear"),
                        {linear->input(0), p, slot});
      });
}

/* FP32 on XNNPACK: the encoder's linear layers, and the joiner's or the
 * CTC head's (as INT8 takes them). A layer XNNPACK cannot pack fails the
 * load; by default asr_net_load then loads the model again on BLAS. */
void make_xnnpack(asr_net &n) {
  n.xnnpack_tried = true;
  try {
    n.info.packed = xnnpack_method(n.encoder, "forward");
    n.info.packed += n.info.family == ASR_CTC ? xnnpack_method(n.ctc, "forward")
                                              : xnnpack_method(n.joiner, "forward");
  } catch (const std::exception &e) {
    const c10::Error *ce = dynamic_cast<const c10::Error *>(&e);
    throw failure(n.label +
                  ": linear layers on XNNPACK: " + (ce ? ce->what_without_backtrace() : e.what()));
  }
}

/* INT8: the encoder's linear layers, and the joiner's (its forward: the
 * output layer, and the projections when it applies them itself) or the
 * CTC head's. */
void make_int8(asr_net &n) {
  auto &ctx = at::globalContext();
  const auto &engines = ctx.supportedQEngines();
  at::QEngine want = at::QEngine::NoQEngine;
  for (at::QEngine e : {at::QEngine::ONEDNN, at::QEngine::FBGEMM})
    if (want == at::QEngine::NoQEngine &&
        std::find(engines.begin(), engines.end(), e) != engines.end())
      want = e;
  if (want == at::QEngine::NoQEngine)
    throw failure(n.label +
                  ": parameter precision int8: this libtorch has no x86 quantised engine "
                  "(oneDNN or FBGEMM) for dynamic int8 linear layers");
  at::QEngine before = ctx.qEngine();
  ctx.setQEngine(want);
  try {
    uint32_t enc = quantise_method(n.encoder, "forward");
    if (enc == 0)
      throw failure(n.label +
                    ": parameter precision int8: the encoder's forward has no linear "
                    "layer (aten::linear on its own weights) to quantise");
    n.info.quantised = enc;
    if (n.info.family == ASR_CTC)
      n.info.quantised += quantise_method(n.ctc, "forward");
    else
      n.info.quantised += quantise_method(n.joiner, "forward");
  } catch (...) {
    ctx.setQEngine(before);
    throw;
  }
  ctx.setQEngine(before);
}

/* BF16: every FP32 tensor the encoder holds (parameters, buffers, other
 * tensor attributes and lists of tensors such as an LSTM's _flat_weights,
 * its submodules' too) in bfloat16. */
void make_bf16(asr_net &n) {
  if (!cpu_has("avx512_bf16"))
    throw failure(n.label +
                  ": parameter precision bf16: this processor has no AVX512_BF16 "
                  "(/proc/cpuinfo flags); use fp32 or int8");
  for (const torch::jit::Module &sub : n.encoder.modules()) {
    c10::intrusive_ptr<c10::ivalue::Object> obj = sub._ivalue();
    for (size_t i = 0; i < obj->slots().size(); i++) {
      const c10::IValue &v = obj->getSlot(i);
      if (v.isTensor() && v.toTensor().scalar_type() == torch::kFloat) {
        obj->setSlot(i, v.toTensor().to(torch::kBFloat16));
      } else if (v.isTensorList()) { /* an LSTM's _flat_weights */
        c10::List<at::Tensor> list = v.toTensorList().copy();
        for (size_t k = 0; k < list.size(); k++)
          if (list.get(k).scalar_type() == torch::kFloat)
            list.set(k, list.get(k).to(torch::kBFloat16));
        obj->setSlot(i, list);
      }
    }
  }
}

std::string short_reason(const asr_net *n, const std::string &msg);

void load(asr_net &n) {
  try {
    n.module = torch::jit::load(n.o.file, c10::Device(c10::kCPU));
  } catch (const c10::Error &e) {
    throw failure(n.label + ": cannot load " + n.o.file +
                  " as TorchScript: " + e.what_without_backtrace());
  }
  n.module.eval();
  n.encoder = part(n, "encoder", true);
  bool has_joiner = child(n.module, "joiner").has_value();
  bool has_ctc = child(n.module, "ctc_output").has_value();
  if (!n.o.family_given)
    n.info.family = has_ctc && !has_joiner ? ASR_CTC : ASR_TRANSDUCER;
  else
    n.info.family = n.o.family;
  chunking(n);
  if (n.info.family == ASR_CTC) {
    n.ctc = part(n, "ctc_output", true);
    n.info.blank_id = n.o.ctc_blank;
    if (n.info.blank_id < 0 || n.info.blank_id >= (int64_t)n.o.vocab_size)
      throw failure(n.label + ": a CTC model's tokens.txt must name its blank (<blk> or <blank>)");
  } else {
    n.decoder = part(n, "decoder", true);
    n.joiner = part(n, "joiner", true);
    for (const char *a : {"context_size", "blank_id"})
      if (!n.decoder.hasattr(a) || !n.decoder.attr(a).isInt())
        throw failure(n.label + ": decoder has no int attribute '" + a + "'");
    n.info.context_size = n.decoder.attr("context_size").toInt();
    n.info.blank_id = n.decoder.attr("blank_id").toInt();
    if (n.info.context_size < 1 || n.info.context_size > 16)
      throw failure(n.label + ": decoder.context_size " + std::to_string(n.info.context_size) +
                    " is not 1..16");
    n.decoder_args = forward_args(n.decoder);
    n.joiner_args = forward_args(n.joiner);
    if (n.decoder_args < 1 || n.decoder_args > 2)
      throw failure(n.label + ": decoder.forward takes " + std::to_string(n.decoder_args) +
                    " arguments; the contract is forward(y, need_pad)");
    if (n.joiner_args < 2 || n.joiner_args > 3)
      throw failure(n.label + ": joiner.forward takes " + std::to_string(n.joiner_args) +
                    " arguments; the contract is forward(encoder_out, decoder_out, project_input)");
    n.has_proj = n.joiner_args == 3 && child(n.joiner, "encoder_proj").has_value() &&
                 child(n.joiner, "decoder_proj").has_value();
  }
  if (forward_args(n.encoder) != 3)
    throw failure(n.label + ": encoder.forward takes " + std::to_string(forward_args(n.encoder)) +
                  " arguments; the contract is forward(features, feature_lengths, states)");
  if (n.o.precision == ASR_INT8) make_int8(n);
  if (n.o.precision == ASR_BF16) make_bf16(n);
  if (n.o.precision == ASR_FP32 && n.o.linear != ASR_LINEAR_BLAS) make_xnnpack(n);
  discover_axes(n);
  if (n.o.precision == ASR_BF16) {
    n.info.state_bytes = 0;
    for (at::Tensor &t : n.init) {
      if (t.scalar_type() == torch::kFloat) t = t.to(torch::kBFloat16);
      n.info.state_bytes += t.nbytes();
    }
  }
  if (n.info.family == ASR_TRANSDUCER) {
    if (n.info.blank_id < 0 || n.info.blank_id >= (int64_t)n.o.vocab_size)
      throw failure(n.label + ": decoder.blank_id " + std::to_string(n.info.blank_id) +
                    " is not a token id of tokens.txt");
    std::vector<int64_t> ctx = start_context(n);
    try {
      n.init_dec = run_decoder(n, context_tensor({&ctx})).clone();
    } catch (const failure &) {
      throw;
    } catch (const std::exception &e) {
      const c10::Error *ce = dynamic_cast<const c10::Error *>(&e);
      throw failure(n.label + ": the decoder fails on an utterance's start context [-1, ..., " +
                    "blank] (icefall's and sherpa's; its decoder gives -1 a zero embedding: " +
                    "embedding(y.clamp(min=0)) * (y >= 0)): " +
                    short_reason(&n, ce ? ce->what_without_backtrace() : e.what()));
    }
  }
  if (n.o.precision == ASR_FP32) return dry_run(n);
  try {
    dry_run(n);
  } catch (const std::exception &e) {
    const c10::Error *ce = dynamic_cast<const c10::Error *>(&e);
    throw failure(std::string(ce ? ce->what_without_backtrace() : e.what()) +
                  " (parameter precision " + precision_name(n.o.precision) +
                  ": the model does not run so; fp32 does)");
  }
}

/* A TorchScript exception's message is its whole traceback: a client
 * gets the raised error itself (its last line); the log gets all of it. */
std::string short_reason(const asr_net *n, const std::string &msg) {
  if (msg.find("TorchScript interpreter") == std::string::npos) return msg;
  if (n)
    HARK_BACKEND_LOG(HARK_BACKEND_LOG_ERROR, "%s: the module threw:\n%s", n->label.c_str(),
                     msg.c_str());
  size_t end = msg.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) return msg;
  size_t start = msg.rfind('\n', end);
  return "the module threw: " + msg.substr(start == std::string::npos ? 0 : start + 1,
                                           end + 1 - (start == std::string::npos ? 0 : start + 1));
}

template <class F>
int guarded(const asr_net *n, char *err, size_t errlen, F &&body) {
  try {
    body();
    return 0;
  } catch (const failure &f) {
    put_err(err, errlen, f.what());
  } catch (const c10::Error &e) {
    put_err(err, errlen,
            (n ? n->label + ": " : std::string()) + short_reason(n, e.what_without_backtrace()));
  } catch (const std::exception &e) {
    put_err(err, errlen, (n ? n->label + ": " : std::string()) + short_reason(n, e.what()));
  } catch (...) {
    put_err(err, errlen, (n ? n->label : std::string("neural_asr")) + ": unknown C++ exception");
  }
  return -1;
}

/* The calling thread's libtorch threads for what it runs next: `n`
 * intra-op threads, and with one, XNNPACK on this thread alone. */
void use_threads(int n) {
  if (at::get_num_threads() != n) at::set_num_threads(n);
  caffe2::_NoPThreadPoolGuard::set_enabled(n == 1);
}

} // namespace

TORCH_LIBRARY(hark_asr, m) {
  m.def(
      "xnn_linear(Tensor x, __torch__.torch.classes.xnnpack.LinearOpContext packed, int slot) -> "
      "Tensor",
      torch::CppFunction::makeFromBoxedFunction<&xnn_linear>());
}

extern "C" {

asr_net *asr_net_load(const asr_net_opts *o, char *err, size_t errlen) {
  auto n = std::make_unique<asr_net>();
  n->label = o->model_label;
  n->o = *o;
  n->o.model_label = n->label.c_str();
  std::string file = o->file;
  auto attempt = [&] {
    n->o.file = file.c_str();
    use_threads(o->intra_threads);
    c10::InferenceMode guard;
    load(*n);
  };
  int rc = guarded(n.get(), err, errlen, attempt);
  if (rc != 0 && o->linear == ASR_LINEAR_DEFAULT && n->xnnpack_tried) {
    /* XNNPACK is the default's speed, not a condition: a model that fails
     * with its layers there is loaded again on libtorch's BLAS, and the
     * load log says why. */
    std::string why = errlen ? err : "";
    n = std::make_unique<asr_net>();
    n->label = o->model_label;
    n->o = *o;
    n->o.model_label = n->label.c_str();
    n->o.linear = ASR_LINEAR_BLAS;
    rc = guarded(n.get(), err, errlen, attempt);
    if (rc == 0) snprintf(n->info.linear_note, sizeof n->info.linear_note, "%s", why.c_str());
  }
  if (rc != 0) return nullptr;
  if (o->precision == ASR_INT8)
    HARK_BACKEND_LOG(HARK_BACKEND_LOG_INFO, "%s: precision int8: %u linear layers quantised",
                     n->label.c_str(), n->info.quantised);
  else if (o->precision == ASR_BF16)
    HARK_BACKEND_LOG(HARK_BACKEND_LOG_INFO, "%s: precision bf16: the encoder in bfloat16",
                     n->label.c_str());
  n->o.file = nullptr; /* `file` dies here; only load needed it */
  return n.release();
}

void asr_net_free(asr_net *net) { delete net; }

const asr_net_info *asr_net_get_info(const asr_net *net) { return &net->info; }

asr_net_stream *asr_net_stream_new(asr_net *net, char *err, size_t errlen) {
  asr_net_stream *s = nullptr;
  guarded(net, err, errlen, [&] {
    auto p = std::make_unique<asr_net_stream>();
    p->net = net;
    for (const at::Tensor &t : net->init) p->states.push_back(t.clone());
    p->hyps.push_back(start_hyp(*net));
    s = p.release();
  });
  return s;
}

void asr_net_stream_free(asr_net_stream *s) { delete s; }

void asr_net_stream_reset_search(asr_net_stream *s) {
  s->hyps.clear();
  s->hyps.push_back(start_hyp(*s->net));
}

uint64_t asr_net_stream_frames(const asr_net_stream *s) { return s->frames; }

uint32_t asr_net_stream_hyps(const asr_net_stream *s, uint32_t k, asr_hyp *out) {
  uint32_t n = 0;
  for (const hyp &h : s->hyps) {
    if (n == k) break;
    out[n++] = {h.ys.data(),    h.frames.data(),       h.ends.data(),
                h.probs.data(), (uint32_t)h.ys.size(), (float)h.logp};
  }
  return n;
}

int asr_net_step(asr_net *net, asr_net_stream **streams, const float *const *feats, uint32_t n,
                 char *err, size_t errlen) {
  if (n == 0) return 0;
  return guarded(net, err, errlen, [&] {
    use_threads(net->o.intra_threads);
    c10::InferenceMode guard;
    std::vector<std::vector<hyp>> hyps;
    search(*net, streams, n, encode(*net, streams, feats, n), hyps);
    for (uint32_t i = 0; i < n; i++) {
      streams[i]->hyps = std::move(hyps[i]);
      streams[i]->frames += net->info.out_frames;
    }
  });
}

} // extern "C"
