// cli.h: command-line flags, llama.cpp style.
#pragma once

#include <string>

#include "sampler.h"

struct CliOptions {
  std::string model_path;  ///< -m
  std::string prompt;      ///< -p, or the contents of -f
  bool prompt_given = false;
  int n_predict = 128;  ///< -n; -1 = until end of generation or context
  int n_threads = 0;    ///< -t; 0 = physical cores
  int n_ctx = 0;        ///< -c; 0 = min(model's training context, kDefaultContext)
  bool seed_given = false;
  SamplerParams sampler;         ///< -s/--seed, --temp, --top-k, --top-p
  bool tokenize_only = false;    ///< --tokenize
  std::string dump_logits_path;  ///< --dump-logits PATH
  bool chat = false;             ///< --chat
  std::string chat_template;     ///< --chat-template NAME
  std::string system_prompt;     ///< --system TEXT
  bool show_special = false;     ///< --special: print control tokens
  bool perplexity = false;       ///< --perplexity FILE: score FILE's text (in prompt)
  int ppl_chunks = -1;           ///< --chunks N: at most N chunks (-1 = all)
  std::string kl_base_out;       ///< --kl-divergence-base F: write log-probabilities to F
  std::string kl_base_in;        ///< --kl-divergence F: compare with F's log-probabilities
  bool help = false;             ///< -h/--help
};

/// Default KV cache length when -c is not given (capped by the model's training context).
constexpr int kDefaultContext = 4096;

/// Parses argv; throws Error naming the flag on a bad or missing value or an unknown flag.
CliOptions parse_cli(int argc, char** argv);
/// The --help text.
std::string cli_usage(const char* program);
/// main()'s body for the engine and the server: returns run(argc, argv), or prints what it threw
/// as one line on stderr ("error: ...") and returns 1.
int run_reporting_errors(int (*run)(int, char**), int argc, char** argv);
