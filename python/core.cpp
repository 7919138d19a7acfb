// core.cpp: the Python module's native half (dsengine._core), built with pybind11 against one
// stage (make python [STAGE=NN]). It holds the file, tokenizer, model, engine and generation
// Session of common/, and hands Python the generation loop one token at a time, so that
// dsengine/__init__.py can stream, stop on strings and raise KeyboardInterrupt between tokens.
//
// Every call that runs the model releases the GIL. The class is not thread-safe by itself:
// dsengine.Llama serialises calls with a lock. Error becomes dsengine.EngineError (a
// RuntimeError); std::bad_alloc becomes MemoryError (pybind11's own translation).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat.h"
#include "cli.h"
#include "engine.h"
#include "error.h"
#include "generate.h"
#include "gguf.h"
#include "model.h"
#include "timing.h"
#include "tokenizer.h"

#ifndef STAGE_NAME
#define STAGE_NAME "unknown"
#endif

namespace py = pybind11;

namespace {

/// Text from the engine as a Python str; bytes that are not UTF-8 become U+FFFD.
py::str utf8_str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

/// One GGUF metadata value as the Python value it is: int, float, bool, str or a list of them.
py::object metadata_value(const GGUFValue& v) {
  switch (v.type) {
    case GGUFType::BOOL:
      return py::bool_(v.i != 0);
    case GGUFType::UINT64:
      return py::int_(v.u);
    case GGUFType::FLOAT32:
    case GGUFType::FLOAT64:
      return py::float_(v.f);
    case GGUFType::STRING:
      return utf8_str(v.s);
    case GGUFType::ARRAY: {
      py::list out;
      if (v.array_type == GGUFType::STRING) {
        for (const std::string& s : v.strings) out.append(utf8_str(s));
      } else if (v.array_type == GGUFType::FLOAT32 || v.array_type == GGUFType::FLOAT64) {
        for (double f : v.floats) out.append(f);
      } else if (v.array_type == GGUFType::BOOL) {
        for (int64_t i : v.ints) out.append(py::bool_(i != 0));
      } else {
        for (int64_t i : v.ints) out.append(i);
      }
      return out;
    }
    default:
      return py::int_(v.i);
  }
}

/// Everything one loaded model needs. Held by shared_ptr, so that a logits array handed to
/// Python keeps its memory alive after close().
struct State {
  std::shared_ptr<const GGUFFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Session> session;
  std::vector<float> logits;  ///< the last logits, copied out of the engine (n_vocab)
};

class NativeEngine {
 public:
  /// vocab_only: the tokenizer alone (no tensors read, no engine), as llama-cpp-python's
  /// vocab_only; the calls that run the model then raise ValueError.
  NativeEngine(const std::string& path, int n_ctx, int n_threads, uint64_t seed, bool vocab_only)
      : state_(std::make_shared<State>()) {
    State& s = *state_;
    s.file = std::make_shared<const GGUFFile>(path);
    s.tokenizer = std::make_unique<Tokenizer>(*s.file);
    if (vocab_only) return;
    s.model = std::make_unique<Model>(s.file);
    const ModelConfig& c = s.model->config();
    check(s.tokenizer->n_vocab() == c.n_vocab, path, ": the tokenizer has ", s.tokenizer->n_vocab(),
          " tokens but the model's vocabulary is ", c.n_vocab);
    EngineOptions options;
    options.n_ctx = n_ctx > 0 ? n_ctx : std::min(c.n_ctx_train, kDefaultContext);
    options.n_threads = std::min(n_threads > 0 ? n_threads : physical_cores(), usable_cpus());
    s.engine = create_engine(*s.model, options);
    SamplerParams params;
    params.seed = seed;
    s.session = std::make_unique<Session>(*s.engine, *s.tokenizer, params, c.n_vocab);
    s.logits.assign(static_cast<size_t>(c.n_vocab), 0.0f);
  }

  void close() { state_.reset(); }
  bool closed() const { return state_ == nullptr; }

  int n_ctx() const { return running().engine->context_length(); }
  int n_vocab() const { return state().tokenizer->n_vocab(); }
  int n_threads() const { return running().engine->threads(); }
  int n_ctx_train() const { return running().model->config().n_ctx_train; }
  bool slides_past_context() const { return running().engine->slides_past_context(); }
  int n_tokens() const { return running().session->position(); }
  int bos() const { return state().tokenizer->bos(); }
  int eos() const { return state().tokenizer->eos(); }
  bool add_bos() const { return state().tokenizer->add_bos(); }
  bool is_end_of_generation(int id) const {
    return state().tokenizer->is_end_of_generation(checked_token(id));
  }

  std::vector<int> tokenize(const std::string& text, bool add_bos, bool special) const {
    const Tokenizer& t = *state().tokenizer;
    std::vector<int> ids;
    if (add_bos && t.add_bos() && t.bos() >= 0) ids.push_back(t.bos());
    const std::vector<int> body = t.encode(text, special);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }

  py::bytes detokenize(const std::vector<int>& ids, bool special) const {
    for (int id : ids) checked_token(id);
    return py::bytes(state().tokenizer->decode(ids, special));
  }

  py::bytes token_piece(int id, bool special) const {
    return py::bytes(state().tokenizer->piece(checked_token(id), special));
  }

  py::dict metadata() const {
    py::dict out;
    for (const auto& [key, value] : state().file->metadata())
      out[utf8_str(key)] = metadata_value(value);
    return out;
  }

  std::string chat_template_name() const {
    return ::chat_template_name(detect_chat_template(*state().file, ""));
  }

  /// The conversation in the file's chat template (or the one named), ready to tokenize with
  /// special tokens parsed.
  std::string format_chat(const std::vector<std::pair<std::string, std::string>>& messages,
                          const std::string& template_name) const {
    const State& s = state();
    const ChatTemplate t = detect_chat_template(*s.file, template_name);
    std::vector<ChatMessage> talk;
    for (const auto& [role, content] : messages) talk.push_back({role, content});
    return format_conversation(t, talk, bos_text(*s.tokenizer));
  }

  /// Runs ids at the end of the context (a token sampled last and not yet run goes first).
  void eval(const std::vector<int>& ids) {
    State& s = running();
    for (int id : ids) checked_token(id);
    {
      py::gil_scoped_release unlocked;
      s.session->evaluate(ids);
    }
    copy_logits();
  }

  void reset() { running().session->reset(); }

  /// Prefill of a generation: ids, then sampling as the arguments say.
  void start(const std::vector<int>& ids, int n_predict, float temperature, int top_k, float top_p,
             std::optional<uint64_t> seed) {
    State& s = running();
    for (int id : ids) checked_token(id);
    SamplerParams params;
    params.temperature = temperature;
    params.top_k = top_k;
    params.top_p = top_p;
    s.session->set_sampler(params);
    if (seed) s.session->reseed(*seed);
    {
      py::gil_scoped_release unlocked;
      s.session->start(ids, n_predict);
    }
    copy_logits();
  }

  /// The next token and its text (bytes of whole UTF-8 characters), or None at the end.
  std::optional<std::pair<int, py::bytes>> next() {
    State& s = running();
    GenerationStep step;
    bool more = false;
    {
      py::gil_scoped_release unlocked;
      more = s.session->next(step);
    }
    copy_logits();
    if (!more) return std::nullopt;
    return std::make_pair(step.token, py::bytes(step.text));
  }

  /// Ends the generation; returns the text still held back.
  py::bytes finish() { return py::bytes(running().session->finish()); }

  /// The last generation's counts and times, and why it stopped.
  py::dict stats() const {
    const GenerationStats& g = running().session->stats();
    static const char* const kReasons[] = {"end_of_generation", "token_limit", "context_full",
                                           "callback"};
    py::dict out;
    out["prompt_tokens"] = g.prompt_tokens;
    out["prefill_ms"] = g.prefill_ms;
    out["gen_tokens"] = g.gen_tokens;
    out["decode_steps"] = g.decode_steps;
    out["decode_ms"] = g.decode_ms;
    out["stop"] = kReasons[static_cast<int>(g.stop)];
    out["last_token"] = g.last_token;
    return out;
  }

  /// The last logits as a float32 array over this object's buffer (no copy), kept alive by the
  /// array itself.
  py::array_t<float> logits() const {
    running();
    auto keep = new std::shared_ptr<State>(state_);
    py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<State>*>(p); });
    py::array_t<float> a({static_cast<py::ssize_t>(state_->logits.size())},
                         {static_cast<py::ssize_t>(sizeof(float))}, state_->logits.data(), owner);
    py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    return a;
  }

 private:
  State& state() const {
    if (!state_) throw std::invalid_argument("the model is closed");
    return *state_;
  }

  State& running() const {
    State& s = state();
    if (!s.engine) throw std::invalid_argument("the model was loaded with vocab_only=True");
    return s;
  }

  int checked_token(int id) const {
    if (id < 0 || id >= n_vocab()) {
      throw std::invalid_argument("token id " + std::to_string(id) + " is out of range [0, " +
                                  std::to_string(n_vocab()) + ")");
    }
    return id;
  }

  void copy_logits() {
    State& s = *state_;
    if (const float* l = s.session->last_logits())
      std::copy(l, l + s.logits.size(), s.logits.begin());
  }

  std::shared_ptr<State> state_;
};

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "Native half of dsengine: one stage of the staged DeepSeek CPU engine.";
  m.attr("stage") = STAGE_NAME;
  py::register_exception<Error>(m, "EngineError", PyExc_RuntimeError);

  py::class_<NativeEngine>(m, "NativeEngine")
      .def(py::init<const std::string&, int, int, uint64_t, bool>(), py::arg("path"),
           py::arg("n_ctx"), py::arg("n_threads"), py::arg("seed"), py::arg("vocab_only"))
      .def("close", &NativeEngine::close)
      .def_property_readonly("closed", &NativeEngine::closed)
      .def("n_ctx", &NativeEngine::n_ctx)
      .def("n_vocab", &NativeEngine::n_vocab)
      .def("n_threads", &NativeEngine::n_threads)
      .def("n_ctx_train", &NativeEngine::n_ctx_train)
      .def("slides_past_context", &NativeEngine::slides_past_context)
      .def("n_tokens", &NativeEngine::n_tokens)
      .def("bos", &NativeEngine::bos)
      .def("eos", &NativeEngine::eos)
      .def("add_bos", &NativeEngine::add_bos)
      .def("is_end_of_generation", &NativeEngine::is_end_of_generation)
      .def("tokenize", &NativeEngine::tokenize)
      .def("detokenize", &NativeEngine::detokenize)
      .def("token_piece", &NativeEngine::token_piece)
      .def("metadata", &NativeEngine::metadata)
      .def("chat_template_name", &NativeEngine::chat_template_name)
      .def("format_chat", &NativeEngine::format_chat)
      .def("eval", &NativeEngine::eval)
      .def("reset", &NativeEngine::reset)
      .def("start", &NativeEngine::start)
      .def("next", &NativeEngine::next)
      .def("finish", &NativeEngine::finish)
      .def("stats", &NativeEngine::stats)
      .def("logits", &NativeEngine::logits);
}
