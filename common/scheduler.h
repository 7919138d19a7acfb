// scheduler.h: many requests decoded together, for the server (common/server.cpp).
//
// The engine holds one KV cache per sequence (EngineOptions::n_seq, kFirstBatchedStage on). Each
// request takes a free sequence; one thread runs the loop: a new request's prompt is prefilled
// into its sequence, then each step runs the last token of every active request through the
// engine in one forward_batch() (each weight read once for all of them) and samples each row
// with the request's own sampler. Requests join and leave between steps; a cancelled one (a
// client gone, a stop string found) frees its sequence at the next step.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine.h"
#include "sampler.h"
#include "tokenizer.h"

/// What a request asks for.
struct GenerationRequest {
  std::vector<int> prompt;  ///< tokens, BOS included when wanted (1 .. context)
  int max_tokens = -1;      ///< < 0: until the end of text or of the context
  SamplerParams sampler;
  bool ignore_eos = false;  ///< end tokens are text like any other (benchmarks: a fixed length)
};

/// Why a request ended, in the OpenAI API's words: "stop" (an end token, a stop string, a
/// cancel), "length" (max_tokens or the context), or "error" (the engine failed: message).
struct GenerationResult {
  std::string finish_reason;
  std::string error;
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

/// One request in flight, shared by the thread that serves its client and the scheduler.
class Job {
 public:
  explicit Job(GenerationRequest request) : request_(std::move(request)) {}

  /// Blocks until new text or the end. Appends the new text to text; returns the result once the
  /// job has ended and all its text was taken, else nothing.
  std::optional<GenerationResult> wait(std::string& text);
  /// Ends the job at the next step (its text so far stays valid). Safe from any thread.
  void cancel();
  bool cancelled() const;

  const GenerationRequest& request() const { return request_; }

 private:
  friend class Scheduler;
  void deliver(const std::string& text);
  void finish(GenerationResult result);

  GenerationRequest request_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::string text_;  ///< generated, not yet taken by wait()
  std::optional<GenerationResult> result_;
  bool cancelled_ = false;
};

class Scheduler {
 public:
  /// engine and tokenizer must outlive the scheduler. max_queue: requests waiting for a sequence
  /// beyond which submit() refuses.
  Scheduler(Engine& engine, const Tokenizer& tokenizer, int n_vocab, int max_queue);
  ~Scheduler();

  /// Queues a request; nullptr when the queue is full. Throws Error for a request that cannot
  /// run (empty prompt, prompt or prompt + max_tokens past the context).
  std::shared_ptr<Job> submit(GenerationRequest request);
  /// The loop; returns after stop(). Run it on its own thread.
  void run();
  /// Ends the loop: queued and running jobs finish with what they have ("stop").
  void stop();

  int sequences() const { return static_cast<int>(slots_.size()); }
  int context_length() const { return engine_.context_length(); }
  /// Requests running and waiting now.
  int active() const;
  int queued() const;

 private:
  struct Slot {
    std::shared_ptr<Job> job;  ///< nullptr: free
    int pos = 0;               ///< positions run in this sequence
    int last = -1;             ///< the token sampled last, not yet run
    int generated = 0;
    Rng rng{0};
    std::unique_ptr<StreamDecoder> decoder;
    std::vector<float> logits;
    std::vector<Candidate> candidates;
  };

  void admit(int seq, std::shared_ptr<Job> job);
  /// Samples the next token of the slot's job from logits and hands out its text; ends the job
  /// when the token ends it. Returns true when the job goes on.
  bool advance(Slot& slot, const float* logits);
  void end(Slot& slot, const std::string& reason, const std::string& error = "");
  void step();

  Engine& engine_;
  const Tokenizer& tokenizer_;
  int n_vocab_;
  int max_queue_;
  std::vector<Slot> slots_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
};
