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
#include <torch/script.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

struct asr_net {
  std::string label;
  asr_net_opts o{};
  asr_net_info info{};
  torch::jit::Module module, encoder, decoder, joiner, ctc;
  bool has_proj = false;        /* joiner.encoder_proj / decoder_proj used apart */
  size_t joiner_args = 3;       /* joiner.forward's arguments after self */
  size_t decoder_args = 2;      /* decoder.forward's */
  std::vector<int64_t> axes;    /* each state's batch axis */
  std::vector<int64_t> widths;  /* its size per stream on that axis */
  std::vector<at::Tensor> init; /* one stream's initial states */
  at::Tensor init_dec;          /* decoder output for the blank context, [1, J] */
};

struct asr_net_stream {
  asr_net *net;
  std::vector<at::Tensor> states;
  at::Tensor dec;           /* transducer: the decoder output for ctx */
  std::vector<int64_t> ctx; /* transducer: the last context_size tokens */
  int64_t ctc_prev = -1;    /* CTC: the previous frame's best token */
};

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

/* The encoder on n chunks at once; the new states are returned through
 * `next`, one vector per stream. */
at::Tensor encode(asr_net &n, asr_net_stream **ss, const float *const *feats, uint32_t count,
                  std::vector<std::vector<at::Tensor>> &next) {
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
  c10::IValue r = n.encoder.forward({x, lens, states});
  if (!r.isTuple() || r.toTupleRef().elements().size() != 3)
    throw failure(n.label + ": encoder must return (encoder_out, encoder_out_lens, states)");
  const auto &el = r.toTupleRef().elements();
  at::Tensor out = as_tensor(el[0], n.label + ": encoder_out");
  std::vector<at::Tensor> ns = tensor_list(el[2], n.label + ": encoder's new states");
  if (out.dim() != 3 || out.size(0) != count || out.size(1) != n.info.out_frames)
    throw failure(n.label + ": encoder gave " + shape_of(out) + " for " + std::to_string(count) +
                  " chunks; expected [" + std::to_string(count) + ", " +
                  std::to_string(n.info.out_frames) + ", D]");
  if (ns.size() != n.init.size())
    throw failure(n.label + ": encoder returned " + std::to_string(ns.size()) + " states, not " +
                  std::to_string(n.init.size()));
  next.assign(count, std::vector<at::Tensor>(ns.size()));
  for (size_t k = 0; k < ns.size(); k++) {
    int64_t ax = n.axes[k], w = n.widths[k];
    if (ns[k].dim() != n.init[k].dim() || ns[k].size(ax) != w * (int64_t)count)
      throw failure(n.label + ": encoder's new state " + std::to_string(k) + " is " +
                    shape_of(ns[k]) + " for " + std::to_string(count) + " streams");
    for (uint32_t i = 0; i < count; i++)
      next[i][k] = ns[k].narrow(ax, (int64_t)i * w, w).clone(at::MemoryFormat::Contiguous);
  }
  return out;
}

/* Greedy search over the chunk for every stream of the round. */
void greedy_transducer(asr_net &n, asr_net_stream **ss, uint32_t count, const at::Tensor &enc_out,
                       asr_chunk_out *out, std::vector<at::Tensor> &dec_next,
                       std::vector<std::vector<int64_t>> &ctx_next) {
  at::Tensor enc = project_encoder(n, enc_out);
  std::vector<at::Tensor> decs;
  for (uint32_t i = 0; i < count; i++) decs.push_back(ss[i]->dec);
  at::Tensor dec = count == 1 ? decs[0] : torch::cat(decs, 0);
  ctx_next.resize(count);
  for (uint32_t i = 0; i < count; i++) ctx_next[i] = ss[i]->ctx;
  for (uint32_t t = 0; t < n.info.out_frames; t++) {
    at::Tensor logits = run_joiner(n, enc.select(1, t), dec);
    if (t == 0 && logits.size(1) != n.o.vocab_size)
      throw failure(n.label + ": joiner gives " + std::to_string(logits.size(1)) +
                    " logits, tokens.txt has " + std::to_string(n.o.vocab_size) + " tokens");
    at::Tensor best = logits.argmax(1);
    const int64_t *b = best.data_ptr<int64_t>();
    std::vector<int64_t> rows;
    for (uint32_t i = 0; i < count; i++)
      if (b[i] != n.info.blank_id) rows.push_back(i);
    if (rows.empty()) continue;
    at::Tensor prob = logits.softmax(1);
    std::vector<const std::vector<int64_t> *> ctxs;
    for (int64_t i : rows) {
      auto &c = ctx_next[i];
      c.erase(c.begin());
      c.push_back(b[i]);
      ctxs.push_back(&c);
      asr_chunk_out &o = out[i];
      o.emits[o.n_emits++] = {(int32_t)b[i], t, prob[i][b[i]].item<float>()};
      o.last_emit_end = t + 1;
    }
    at::Tensor d = run_decoder(n, context_tensor(ctxs));
    at::Tensor idx = torch::tensor(rows, torch::kLong);
    if (count == 1)
      dec = d;
    else {
      if (dec.data_ptr() == decs[0].data_ptr()) dec = dec.clone();
      dec.index_copy_(0, idx, d);
    }
  }
  dec_next.resize(count);
  for (uint32_t i = 0; i < count; i++) dec_next[i] = dec.narrow(0, i, 1).clone();
}

void greedy_ctc(asr_net &n, asr_net_stream **ss, uint32_t count, const at::Tensor &enc_out,
                asr_chunk_out *out, std::vector<int64_t> &prev_next) {
  at::Tensor lp = as_tensor(n.ctc.forward({enc_out}), n.label + ": ctc_output's output");
  if (lp.dim() != 3 || lp.size(0) != count || lp.size(1) != n.info.out_frames)
    throw failure(n.label + ": ctc_output gave " + shape_of(lp) + "; expected [N, T', vocab]");
  if (lp.size(2) != n.o.vocab_size)
    throw failure(n.label + ": ctc_output gives " + std::to_string(lp.size(2)) +
                  " log-probs per frame, tokens.txt has " + std::to_string(n.o.vocab_size) +
                  " tokens");
  auto mx = lp.max(2);
  at::Tensor best = std::get<1>(mx).contiguous(), score = std::get<0>(mx).exp().contiguous();
  const int64_t *b = best.data_ptr<int64_t>();
  const float *p = score.data_ptr<float>();
  int64_t T = n.info.out_frames;
  prev_next.resize(count);
  for (uint32_t i = 0; i < count; i++) {
    int64_t prev = ss[i]->ctc_prev;
    for (int64_t t = 0; t < T; t++) {
      int64_t y = b[i * T + t];
      if (y != n.info.blank_id && y != prev) {
        asr_chunk_out &o = out[i];
        o.emits[o.n_emits++] = {(int32_t)y, (uint32_t)t, p[i * T + t]};
      }
      if (y != n.info.blank_id) out[i].last_emit_end = (uint32_t)t + 1;
      prev = y;
    }
    prev_next[i] = prev;
  }
}

void dry_run(asr_net &n) {
  asr_net_stream s;
  s.net = &n;
  s.states = n.init;
  s.ctx.assign(n.info.context_size, n.info.blank_id);
  s.dec = n.init_dec;
  asr_net_stream *ss = &s;
  std::vector<float> zeros((size_t)(n.o.chunk_frames + n.o.pad_frames) * n.o.feature_dim, 0.0f);
  const float *f = zeros.data();
  std::vector<std::vector<at::Tensor>> next;
  /* out_frames is not known yet: take the encoder's word for it once. */
  int64_t T = n.o.chunk_frames + n.o.pad_frames;
  at::Tensor x = torch::zeros({1, T, (int64_t)n.o.feature_dim});
  c10::List<at::Tensor> st;
  for (auto &t : n.init) st.push_back(t);
  c10::IValue r;
  try {
    r = n.encoder.forward({x, torch::full({1}, T, torch::kLong), st});
  } catch (const c10::Error &e) {
    throw failure(n.label + ": encoder(features [1, " + std::to_string(T) + ", " +
                  std::to_string(n.o.feature_dim) +
                  "], lengths, states) failed: " + e.what_without_backtrace());
  }
  if (!r.isTuple() || r.toTupleRef().elements().size() != 3)
    throw failure(n.label + ": encoder must return (encoder_out, encoder_out_lens, states)");
  at::Tensor out = as_tensor(r.toTupleRef().elements()[0], n.label + ": encoder_out");
  if (out.dim() != 3 || out.size(0) != 1 || out.size(1) < 1)
    throw failure(n.label + ": encoder_out is " + shape_of(out) + "; expected [N, T', D]");
  n.info.out_frames = (uint32_t)out.size(1);
  std::vector<asr_emit> emits(n.info.out_frames);
  asr_chunk_out o{emits.data(), 0, 0};
  at::Tensor enc = encode(n, &ss, &f, 1, next);
  if (n.info.family == ASR_CTC) {
    std::vector<int64_t> prev;
    greedy_ctc(n, &ss, 1, enc, &o, prev);
  } else {
    std::vector<at::Tensor> dn;
    std::vector<std::vector<int64_t>> cn;
    greedy_transducer(n, &ss, 1, enc, &o, dn, cn);
  }
}

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
  if (n.info.family == ASR_CTC) {
    n.ctc = part(n, "ctc_output", true);
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
  discover_axes(n);
  if (n.info.family == ASR_TRANSDUCER) {
    if (n.info.blank_id < 0 || n.info.blank_id >= (int64_t)n.o.vocab_size)
      throw failure(n.label + ": decoder.blank_id " + std::to_string(n.info.blank_id) +
                    " is not a token id of tokens.txt");
    std::vector<int64_t> ctx(n.info.context_size, n.info.blank_id);
    n.init_dec = run_decoder(n, context_tensor({&ctx})).clone();
  }
  dry_run(n);
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

} // namespace

extern "C" {

asr_net *asr_net_load(const asr_net_opts *o, char *err, size_t errlen) {
  auto n = std::make_unique<asr_net>();
  n->label = o->model_label;
  n->o = *o;
  n->o.model_label = n->label.c_str();
  std::string file = o->file;
  int rc = guarded(n.get(), err, errlen, [&] {
    n->o.file = file.c_str();
    if (at::get_num_threads() != o->intra_threads) at::set_num_threads(o->intra_threads);
    c10::InferenceMode guard;
    load(*n);
  });
  if (rc != 0) return nullptr;
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
    asr_net_stream_reset_search(p.get());
    s = p.release();
  });
  return s;
}

void asr_net_stream_free(asr_net_stream *s) { delete s; }

void asr_net_stream_reset_search(asr_net_stream *s) {
  const asr_net &n = *s->net;
  if (n.info.family == ASR_TRANSDUCER) {
    s->ctx.assign(n.info.context_size, n.info.blank_id);
    s->dec = n.init_dec;
  }
  s->ctc_prev = -1;
}

int asr_net_step(asr_net *net, asr_net_stream **streams, const float *const *feats, uint32_t n,
                 asr_chunk_out *out, char *err, size_t errlen) {
  if (n == 0) return 0;
  return guarded(net, err, errlen, [&] {
    if (at::get_num_threads() != net->o.intra_threads) at::set_num_threads(net->o.intra_threads);
    c10::InferenceMode guard;
    for (uint32_t i = 0; i < n; i++) out[i].n_emits = out[i].last_emit_end = 0;
    std::vector<std::vector<at::Tensor>> next;
    at::Tensor enc = encode(*net, streams, feats, n, next);
    if (net->info.family == ASR_CTC) {
      std::vector<int64_t> prev;
      greedy_ctc(*net, streams, n, enc, out, prev);
      for (uint32_t i = 0; i < n; i++) streams[i]->ctc_prev = prev[i];
    } else {
      std::vector<at::Tensor> dec;
      std::vector<std::vector<int64_t>> ctx;
      greedy_transducer(*net, streams, n, enc, out, dec, ctx);
      for (uint32_t i = 0; i < n; i++) {
        streams[i]->dec = dec[i];
        streams[i]->ctx = ctx[i];
      }
    }
    for (uint32_t i = 0; i < n; i++) streams[i]->states = std::move(next[i]);
  });
}

} // extern "C"
