// pipeline.cpp: the ranks of an mpirun job and what they send each other (see pipeline.h).
#include "pipeline.h"

#include <time.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "error.h"
#include "timing.h"

namespace {

// Message tags: batches go down the chain (rank r to r + 1), logits from the last rank to 0.
constexpr int kBatchTag = 1;
constexpr int kLogitsTag = 2;
/// A batch message: this header, then its rows (Row each), then x (n, d) floats.
struct BatchHeader {
  int n_rows;    ///< 0: stop
  int n_logits;  ///< the last rows whose logits go back to rank 0
};
/// Prefill batches per rank: with 4, filling and draining the pipeline (a rank waiting for its
/// first batch, or with no next one) takes about a fifth of a prompt's time on 2 ranks.
constexpr int kMicroBatchesPerRank = 4;
/// No smaller batches: each one reads all of a rank's weights, so 16 rows share each read.
constexpr int kMinMicroBatch = 16;
/// A wait polls MPI this many times, then sleeps kPollSleepNs between polls, so an idle rank
/// (waiting for a user at the chat prompt) costs no core; 50 us is ~0.02% of a 7B decode step.
constexpr int kSpinPolls = 1000;
constexpr long kPollSleepNs = 50000;
constexpr double kMsPerSecond = 1000.0;

size_t batch_bytes(int n_rows, int d) {
  return sizeof(BatchHeader) + sizeof(Row) * n_rows + sizeof(float) * size_t(n_rows) * d;
}

/// ENGINE_PIPELINE_TIMEOUT: whole seconds, 1 to a day.
int timeout_from_environment() {
  constexpr long kDay = 86400;
  const char* text = std::getenv("ENGINE_PIPELINE_TIMEOUT");
  if (text == nullptr) return kDefaultTimeoutSeconds;
  char* end = nullptr;
  const long seconds = std::strtol(text, &end, 10);
  check(end != text && *end == '\0' && seconds >= 1 && seconds <= kDay, "ENGINE_PIPELINE_TIMEOUT='",
        text, "': expected whole seconds from 1 to ", kDay);
  return static_cast<int>(seconds);
}

}  // namespace

std::vector<LayerRange> split_layers(const GGUFFile& file, int n_layer, int ranks) {
  check(ranks >= 1 && ranks <= n_layer, file.path(), ": ", ranks, " ranks for ", n_layer,
        " layers; each rank needs at least one layer");
  std::vector<double> layer_bytes(n_layer, 0.0);
  double done = 0;  // token_embd's bytes, rank 0's; then the bytes of the ranks so far
  double total = 0;
  for (const TensorInfo& t : file.tensors()) {
    int layer = -1;
    if (std::sscanf(t.name.c_str(), "blk.%d.", &layer) == 1 && layer >= 0 && layer < n_layer) {
      layer_bytes[layer] += t.nbytes;
    } else if (t.name.rfind("token_embd.", 0) == 0) {
      done += t.nbytes;
    }
    total += t.nbytes;  // the rest (output, output_norm) is the last rank's
  }
  // Each rank but the last takes layers while one more brings its end nearer its share's end.
  std::vector<LayerRange> ranges;
  double start = 0;
  for (int r = 0; r < ranks; ++r) {
    const int first = ranges.empty() ? 0 : ranges.back().end;
    LayerRange range{first, first};
    const double share_end = total * (r + 1) / ranks;
    while (range.end < n_layer - (ranks - 1 - r) &&  // one layer left for each later rank
           (r == ranks - 1 || range.end == range.first ||
            std::abs(done + layer_bytes[range.end] - share_end) < std::abs(done - share_end))) {
      done += layer_bytes[range.end++];
    }
    range.bytes = (r == ranks - 1 ? total : done) - start;
    start = done;
    ranges.push_back(range);
  }
  return ranges;
}

Pipeline::Pipeline(const Model& model, int max_rows)
    : d_(model.config().n_embd), n_vocab_(model.config().n_vocab) {
  const int n_layer = model.config().n_layer;
  layers_ = {0, n_layer, 0};
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) return;  // not started by mpirun
  int provided = 0;  // only the main thread calls MPI (OpenMP's threads never do)
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS,
        "pipeline: MPI_Init failed");
  started_mpi_ = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  // errors come back: check_mpi()
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks_);
  base_rss_mb_ = peak_rss_mb();
  try {
    timeout_seconds_ = timeout_from_environment();
    layers_ = split_layers(model.file(), n_layer, ranks_)[rank_];
  } catch (const Error& e) {  // every rank meets these: rank 0 says so and ends the run
    if (first()) abort_run(e.what());
    MPI_Barrier(MPI_COMM_WORLD);  // rank 0 never comes: its MPI_Abort ends this process
  }
  sent_.resize(batch_bytes(max_rows, d_));
  received_.resize(batch_bytes(max_rows, d_));
}

Pipeline::~Pipeline() {
  if (!started_mpi_) return;
  // A rank that cannot serve (it threw) leaves MPI as is: main() prints its error and exits
  // non-zero, and mpirun ends the other ranks. Rank 0 still tells the others to stop.
  if (std::uncaught_exceptions() > 0 && !first()) return;
  if (!last()) send_batch(nullptr, 0, 0, nullptr);
  wait(send_request_, timeout_seconds_, rank_ + 1, "to take the stop");
  const double rows = std::max<int64_t>(1, decode_rows_);
  std::fprintf(stderr,
               "pipeline: rank %d of %d layers=%d-%d weights_mb=%.1f base_rss_mb=%.1f "
               "peak_rss_mb=%.1f decode_rows=%lld decode_sent_bytes_per_row=%.0f "
               "decode_wait_ms_per_row=%.3f\n",
               rank_, ranks_, layers_.first, layers_.end - 1, layers_.bytes / 1e6, base_rss_mb_,
               peak_rss_mb(), static_cast<long long>(decode_rows_), decode_bytes_sent_ / rows,
               decode_wait_ms_ / rows);
  MPI_Finalize();
}

int Pipeline::micro_batch(int n_tokens, int max_batch) const {
  if (alone()) return max_batch;
  const int batches = kMicroBatchesPerRank * ranks_;
  return std::min(max_batch, std::max(kMinMicroBatch, (n_tokens + batches - 1) / batches));
}

void Pipeline::send_batch(const Row* rows, int n, int n_logits, const float* x) {
  check(n >= 0 && batch_bytes(n, d_) <= sent_.size(), "pipeline: a batch of ", n,
        " rows is over the buffers");
  // sent_ is free again once the next rank has the previous batch.
  wait(send_request_, timeout_seconds_, rank_ + 1, "to take a batch");
  if (first()) {
    decoding_ = n > 0 && n_logits == n;
    if (decoding_) decode_rows_ += n;
  }
  const BatchHeader header{n, n_logits};
  unsigned char* p = sent_.data();
  std::memcpy(p, &header, sizeof header);
  if (n > 0) {  // a stop has no rows
    std::memcpy(p + sizeof header, rows, sizeof(Row) * n);
    std::memcpy(p + sizeof header + sizeof(Row) * n, x, sizeof(float) * size_t(n) * d_);
  }
  const size_t bytes = batch_bytes(n, d_);
  check_mpi(MPI_Isend(p, static_cast<int>(bytes), MPI_BYTE, rank_ + 1, kBatchTag, MPI_COMM_WORLD,
                      &send_request_),
            "sending a batch");
  if (decoding_) decode_bytes_sent_ += static_cast<int64_t>(bytes);
}

int Pipeline::receive_batch(Row* rows, int* n_logits, float* x) {
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Irecv(received_.data(), static_cast<int>(received_.size()), MPI_BYTE, rank_ - 1,
                      kBatchTag, MPI_COMM_WORLD, &request),
            "receiving a batch");
  const double start = now_ms();
  wait(request, 0, rank_ - 1, "to send a batch");
  BatchHeader header;
  const unsigned char* p = received_.data();
  std::memcpy(&header, p, sizeof header);
  decoding_ = header.n_rows > 0 && header.n_logits == header.n_rows;
  if (decoding_) {
    decode_rows_ += header.n_rows;
    if (got_first_) decode_wait_ms_ += now_ms() - start;
  }
  got_first_ = true;
  std::memcpy(rows, p + sizeof header, sizeof(Row) * header.n_rows);
  std::memcpy(x, p + sizeof header + sizeof(Row) * header.n_rows,
              sizeof(float) * size_t(header.n_rows) * d_);
  *n_logits = header.n_logits;
  return header.n_rows;
}

void Pipeline::send_logits(const float* logits, int n) {
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Isend(logits, n * n_vocab_, MPI_FLOAT, 0, kLogitsTag, MPI_COMM_WORLD, &request),
            "sending logits");
  wait(request, timeout_seconds_, 0, "to take the logits");
  if (decoding_) decode_bytes_sent_ += static_cast<int64_t>(sizeof(float)) * n * n_vocab_;
}

void Pipeline::receive_logits(float* logits, int n) {
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(
      MPI_Irecv(logits, n * n_vocab_, MPI_FLOAT, ranks_ - 1, kLogitsTag, MPI_COMM_WORLD, &request),
      "receiving logits");
  const double start = now_ms();
  wait(request, timeout_seconds_, ranks_ - 1, "to send the logits");
  if (decoding_) decode_wait_ms_ += now_ms() - start;
}

void Pipeline::wait(MPI_Request& request, int seconds, int peer, const char* what) {
  const double start = now_ms();
  int done = 0;
  for (int polls = 0;; ++polls) {
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "waiting");
    if (done) return;
    if (seconds > 0 && now_ms() - start > seconds * kMsPerSecond) {
      abort_run("waited " + std::to_string(seconds) + " s (ENGINE_PIPELINE_TIMEOUT) for rank " +
                std::to_string(peer) + " " + what +
                ": a rank has stalled; ending the run on every rank");
    }
    if (polls >= kSpinPolls) {
      const timespec pause{0, kPollSleepNs};
      nanosleep(&pause, nullptr);
    }
  }
}

void Pipeline::check_mpi(int code, const char* what) const {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  abort_run(std::string(what) + ": " + std::string(text, length));
}

void Pipeline::abort_run(const std::string& message) const {
  std::fprintf(stderr, "error: pipeline rank %d of %d: %s\n", rank_, ranks_, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return
}
