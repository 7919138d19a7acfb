// scheduler.cpp: the server's decoding loop, one step for all active requests.
#include "scheduler.h"

#include <algorithm>
#include <cmath>

#include "error.h"

// ---- Job ----

std::optional<GenerationResult> Job::wait(std::string& text) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !text_.empty() || result_.has_value(); });
  text += text_;
  text_.clear();
  return result_;
}

void Job::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
}

bool Job::cancelled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_;
}

void Job::deliver(const std::string& text) {
  if (text.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    text_ += text;
  }
  changed_.notify_all();
}

void Job::finish(GenerationResult result) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    result_ = std::move(result);
  }
  changed_.notify_all();
}

// ---- Scheduler ----

Scheduler::Scheduler(Engine& engine, const Tokenizer& tokenizer, int n_vocab, int max_queue)
    : engine_(engine),
      tokenizer_(tokenizer),
      n_vocab_(n_vocab),
      max_queue_(max_queue),
      slots_(engine.sequences()) {
  for (Slot& s : slots_) s.logits.resize(n_vocab);
}

Scheduler::~Scheduler() {
  stop();
}

std::shared_ptr<Job> Scheduler::submit(GenerationRequest request) {
  const int n_ctx = engine_.context_length();
  const int n = static_cast<int>(request.prompt.size());
  check(n > 0, "the prompt is empty");
  check(n <= n_ctx, "the prompt has ", n, " tokens; the context holds ", n_ctx);
  check(request.max_tokens < 0 || n + request.max_tokens <= n_ctx, "the prompt (", n,
        " tokens) and max_tokens (", request.max_tokens, ") need ", n + request.max_tokens,
        " positions; the context holds ", n_ctx);
  for (int id : request.prompt) {
    check(id >= 0 && id < n_vocab_, "token id ", id, " is outside the vocabulary of ", n_vocab_);
  }
  auto job = std::make_shared<Job>(std::move(request));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || static_cast<int>(queue_.size()) >= max_queue_) return nullptr;
    queue_.push_back(job);
  }
  work_.notify_all();
  return job;
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
}

int Scheduler::active() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int n = 0;
  for (const Slot& s : slots_) n += s.job != nullptr;
  return n;
}

int Scheduler::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(queue_.size());
}

void Scheduler::end(Slot& slot, const std::string& reason, const std::string& error) {
  if (slot.decoder) slot.job->deliver(slot.decoder->flush());
  GenerationResult r;
  r.finish_reason = reason;
  r.error = error;
  r.prompt_tokens = static_cast<int>(slot.job->request().prompt.size());
  r.completion_tokens = slot.generated;
  slot.job->finish(std::move(r));
  std::lock_guard<std::mutex> lock(mutex_);
  slot.job = nullptr;
  slot.decoder.reset();
}

bool Scheduler::advance(Slot& slot, const float* logits) {
  for (int i = 0; i < n_vocab_; ++i) {
    if (!std::isfinite(logits[i])) {
      end(slot, "error",
          "the forward pass gave a non-finite logit; the model's weights may hold "
          "NaN or infinity");
      return false;
    }
  }
  // Sampling may modify its input: a copy, so that the engine's rows stay as computed.
  std::copy(logits, logits + n_vocab_, slot.logits.begin());
  const GenerationRequest& r = slot.job->request();
  const int token =
      sample_token(slot.logits.data(), n_vocab_, r.sampler, slot.rng, slot.candidates);
  if (tokenizer_.is_end_of_generation(token) && !r.ignore_eos) {
    end(slot, "stop");
    return false;
  }
  ++slot.generated;
  slot.last = token;
  slot.job->deliver(slot.decoder->push(token));
  if (r.max_tokens >= 0 && slot.generated >= r.max_tokens) {
    end(slot, "length");
    return false;
  }
  if (slot.pos >= engine_.context_length()) {  // the next token has no position left
    end(slot, "length");
    return false;
  }
  return true;
}

void Scheduler::admit(int seq, std::shared_ptr<Job> job) {
  Slot& slot = slots_[seq];
  const GenerationRequest& r = job->request();
  slot.pos = 0;
  slot.generated = 0;
  slot.last = -1;
  slot.rng = Rng(r.sampler.seed);
  slot.decoder = std::make_unique<StreamDecoder>(tokenizer_);
  slot.job = std::move(job);
  if (r.max_tokens == 0) {
    end(slot, "length");
    return;
  }
  try {
    const float* logits =
        engine_.forward_seq(seq, r.prompt.data(), static_cast<int>(r.prompt.size()), 0);
    slot.pos = static_cast<int>(r.prompt.size());
    advance(slot, logits);
  } catch (const std::exception& e) {
    end(slot, "error", e.what());
  }
}

void Scheduler::step() {
  std::vector<int> tokens, seqs, positions;
  for (int s = 0; s < sequences(); ++s) {
    Slot& slot = slots_[s];
    if (slot.job == nullptr) continue;
    if (slot.job->cancelled()) {
      end(slot, "stop");
      continue;
    }
    tokens.push_back(slot.last);
    seqs.push_back(s);
    positions.push_back(slot.pos);
  }
  if (tokens.empty()) return;
  const int n = static_cast<int>(tokens.size());
  try {
    const float* logits = engine_.forward_batch(tokens.data(), seqs.data(), positions.data(), n);
    for (int i = 0; i < n; ++i) {
      Slot& slot = slots_[seqs[i]];
      ++slot.pos;
      advance(slot, logits + static_cast<size_t>(i) * n_vocab_);
    }
  } catch (const std::exception& e) {
    for (int s : seqs) {
      if (slots_[s].job != nullptr) end(slots_[s], "error", e.what());
    }
  }
}

void Scheduler::run() {
  for (;;) {
    std::vector<std::pair<int, std::shared_ptr<Job>>> joining;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto busy = [this] {
        for (const Slot& s : slots_) {
          if (s.job != nullptr) return true;
        }
        return false;
      };
      work_.wait(lock, [&] { return stopping_ || !queue_.empty() || busy(); });
      if (stopping_) break;
      for (int s = 0; s < sequences() && !queue_.empty(); ++s) {
        if (slots_[s].job != nullptr) continue;
        joining.emplace_back(s, queue_.front());
        queue_.pop_front();
      }
    }
    for (auto& [seq, job] : joining) {
      if (job->cancelled()) {
        GenerationResult r;
        r.finish_reason = "stop";
        r.prompt_tokens = static_cast<int>(job->request().prompt.size());
        job->finish(r);
        continue;
      }
      admit(seq, std::move(job));
    }
    step();
  }
  // Stopping: every job ends with what it has.
  for (Slot& slot : slots_) {
    if (slot.job != nullptr) end(slot, "stop");
  }
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left.swap(queue_);
  }
  for (auto& job : left) {
    GenerationResult r;
    r.finish_reason = "stop";
    r.prompt_tokens = static_cast<int>(job->request().prompt.size());
    job->finish(r);
  }
}
