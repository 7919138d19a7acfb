// pipeline.h: this process's part of an mpirun job, one model split by layers (seed article
// §9.2, pipeline parallelism).
//
// `mpirun -np R engine ...` starts R processes (ranks). Rank r runs the layers split_layers()
// gives it, about file size / R bytes, so a model too big for one machine fits on R; rank 0 also
// looks up the token embeddings, the last rank holds the output norm and matrix. A batch's hidden
// states (n_embd floats a row) go rank to rank with the rows' (sequence, position), and the last
// rank sends the logits rank 0 asks for back to it. Rank 0 tokenizes, samples and streams as one
// process does; the others only serve batches until rank 0 says stop.
// Without mpirun there is one rank: MPI is never started, and the engine is the stage before's.
// Failures end every rank: an MPI error, or a wait longer than ENGINE_PIPELINE_TIMEOUT seconds
// (kDefaultTimeoutSeconds) for the logits or for the next rank to take a batch, prints one line
// and calls MPI_Abort; a rank that exits or dies makes mpirun end the others.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model.h"

/// Where a batch row goes: its sequence's cache, at its position there.
struct Row {
  int seq;
  int pos;
};

/// Layers [first, end) of the model, and the bytes of the rank's tensors.
struct LayerRange {
  int first = 0;
  int end = 0;
  double bytes = 0;
};

/// One range per rank, in order, each of at least one layer and of bytes (its blk.N tensors, plus
/// token_embd on rank 0 and the rest on the last rank) as near total / ranks as whole layers
/// allow. Throws Error when there are more ranks than layers.
std::vector<LayerRange> split_layers(const GGUFFile& file, int n_layer, int ranks);

/// Seconds a wait may take before the run ends: a rank has stalled (mpirun sees a dead one at
/// once). A 7B decode step on one core takes ~0.3 s.
constexpr int kDefaultTimeoutSeconds = 300;

class Pipeline {
 public:
  /// Starts MPI when run by mpirun (OMPI_COMM_WORLD_SIZE set), else is one rank alone.
  /// Batches hold at most max_rows rows.
  Pipeline(const Model& model, int max_rows);
  ~Pipeline();  ///< tells the next rank to stop, reports, ends MPI
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  bool alone() const { return ranks_ == 1; }
  bool first() const { return rank_ == 0; }
  bool last() const { return rank_ == ranks_ - 1; }
  const LayerRange& layers() const { return layers_; }
  /// Rows per batch of an n_tokens prompt: max_batch alone; with R ranks about n_tokens / (4R),
  /// so that each rank works on one batch while the next rank works on the one before.
  int micro_batch(int n_tokens, int max_batch) const;

  /// To the next rank: rows (n,) and their hidden states x (n, d); the last rank sends back the
  /// logits of the last n_logits of them. n = 0: stop. x may be overwritten when it returns.
  void send_batch(const Row* rows, int n, int n_logits, const float* x);
  /// The previous rank's next batch into rows and x: its row count, 0 for stop. Waits without
  /// limit (rank 0 may be waiting for its user).
  int receive_batch(Row* rows, int* n_logits, float* x);
  /// The last rank to rank 0: logits (n, n_vocab); and rank 0's side of it.
  void send_logits(const float* logits, int n);
  void receive_logits(float* logits, int n);

 private:
  /// Waits for request; with seconds > 0 ends the run after that long, saying that it waited
  /// for rank peer to do what ("to take a batch"). No string is built unless it ends the run.
  void wait(MPI_Request& request, int seconds, int peer, const char* what);
  /// Prints "error: pipeline rank r of R: ..." and ends the run on every rank.
  [[noreturn]] void abort_run(const std::string& message) const;
  void check_mpi(int code, const char* what) const;

  int rank_ = 0;
  int ranks_ = 1;
  bool started_mpi_ = false;
  int d_;        ///< floats of a hidden state
  int n_vocab_;  ///< floats of a logits row
  int timeout_seconds_ = kDefaultTimeoutSeconds;
  LayerRange layers_;
  double base_rss_mb_ = 0;  ///< peak RSS before this rank's weights: vocabulary, MPI
  std::vector<unsigned char> sent_, received_;  ///< a batch: header, rows, x
  MPI_Request send_request_ = MPI_REQUEST_NULL;
  // Decode batches (every row's logits come back), for the report line at the end.
  bool decoding_ = false;   ///< the batch being run is one
  bool got_first_ = false;  ///< a first batch came (its wait was the other ranks' loading)
  int64_t decode_rows_ = 0;
  int64_t decode_bytes_sent_ = 0;
  double decode_wait_ms_ = 0;
};
