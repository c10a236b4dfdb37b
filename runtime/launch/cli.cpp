// pprun's command line (cli.h): every flag of docs/pprun.md, parsed into RunOptions.
#include "runtime/launch/cli.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "compiler/diagnostic.h"
#include "compiler/parse_flags.h"
#include "runtime/fail.h"
#include "runtime/launch/failure.h"

namespace pprt {

std::optional<int> parse_command_line(int argc, char** argv, const char* program, RunOptions& o) {
  const std::string about = fmt::format(
      "{}: trains model '{}' from a compiled pipeline plan, one process per rank.\n"
      "Example: ppcompile --layout 'Et|tt|tt|tL' --pp 4 --schedule 1F1B --microbatches 8 --emit "
      "json -o plan.json\n"
      "         {} --plan plan.json --steps 40\n",
      program, o.family.name(), program);
  CLI::App app{about +
                   "Alone it starts one process per rank on this machine; under torchrun or SLURM "
                   "it is one rank.",
               program};
  app.get_formatter()->column_width(34);
  auto* plan =
      app.add_option("--plan", o.plan_path, "The JSON plan to run (ppcompile --emit json)");
  app.add_flag("--reference", o.reference,
               "Run the same model unpipelined in one process (gradient accumulation)");
  app.add_option("--layout", o.layout,
                 "--reference without a plan: the model's layout, e.g. 'Etttt|ttttL'")
      ->excludes(plan);
  app.add_option("--microbatches", o.microbatches,
                 "Microbatches per step (must agree with the plan)");

  // The model's own options (pprt::Family::option), then those every model has. Their values
  // live in maps whose nodes stay put while CLI11 writes them.
  auto* model = app.add_option_group("model", "The model (its options, then --vocab, --seq-len)");
  for (const FamilyOption& f : o.family.options()) switch (f.kind) {
      case OptionKind::Integer:
        model->add_option(f.flag, o.model.integers[f.flag], f.help);
        break;
      case OptionKind::Switch:
        model->add_flag(f.flag, o.model.switches[f.flag], f.help);
        break;
      case OptionKind::File:
        model->add_option(f.flag, o.model.files[f.flag], f.help);
        break;
    }
  model->add_option("--vocab", o.model.integers["--vocab"], "Vocabulary (default 256)");
  model->add_option("--seq-len", o.model.integers["--seq-len"], "Tokens per sequence (default 64)");

  auto* train = app.add_option_group("training");
  train->add_option("--steps", o.train.steps, "Optimizer steps")->capture_default_str();
  train->add_option("--global-batch", o.train.global_batch, "Sequences per step")
      ->capture_default_str();
  train->add_option("--lr", o.train.lr, "Peak learning rate (AdamW)")->capture_default_str();
  train->add_option("--warmup", o.train.warmup,
                    "Linear warm-up steps (default steps/10), then cosine decay");
  train->add_option("--weight-decay", o.train.weight_decay, "AdamW weight decay on matrices")
      ->capture_default_str();
  train->add_option("--clip", o.train.clip, "Clip the global gradient norm to this (0 = off)")
      ->capture_default_str();
  train
      ->add_option("--mtp-loss-weight", o.train.mtp_loss_weight,
                   "Weight lambda of the multi-token-prediction loss: CE + lambda/D * sum CE_k")
      ->capture_default_str();
  auto* seed = train->add_option("--seed", o.train.seed, "Initialisation and data seed")
                   ->capture_default_str();
  train
      ->add_option("--dtype", o.dtype,
                   "fp32 or bf16: the precision of activations and matrix products (bf16: mixed "
                   "precision, with fp32 master weights, gradients and AdamW state; "
                   "docs/gpu.md); with --export --format hf: of the tensors written")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  std::string overlap = "on";
  train
      ->add_option("--overlap", overlap,
                   "on or off: an OVERLAP_F_B runs its forward and backward parts concurrently "
                   "(on the CPU; docs/pprun.md), or one after the other")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  train->add_option("--recompute", o.recompute,
                    "What layers keep between forward and backward, over the plan's \"memory\": "
                    "[TARGET:]MODE items joined by commas, later ones overriding; TARGET all, a "
                    "layer symbol or stageN; MODE none, selective (recompute attention's core and "
                    "the MLP activation) or full (keep each layer's input, rerun its forward "
                    "before the backward); e.g. 'full,stage3:none' (docs/pprun.md)");
  train->add_option("--offload", o.offload,
                    "Plan stages or layer kinds whose activations go to host memory between "
                    "forward and backward (TARGETs joined by commas; GPUs only, see "
                    "--offload-test-host-copy)");
  train->add_flag("--offload-test-host-copy", o.offload_test_host_copy,
                  "For tests: offload on the CPU with host-to-host copies (the bookkeeping of "
                  "--offload without a GPU); on a GPU it changes nothing");
  train->add_option("--data", o.train.data_path,
                    "Train on a data file instead of the synthetic language (see --data-format)");
  std::string data_format = "auto";
  train
      ->add_option("--data-format", data_format,
                   "auto, text (bytes), uint16, uint32 (flat token ids) or megatron (PREFIX.bin + "
                   "PREFIX.idx); auto: a .bin with its .idx is megatron, another .bin uint16, "
                   "anything else text")
      ->check(CLI::IsMember({"auto", "text", "uint16", "uint32", "megatron"}))
      ->capture_default_str();
  // Documents (issue 41; docs/pprun.md, "Documents").
  train->add_option("--eod", o.train.eod,
                    "End-of-document token id of a flat --data file: a document ends after each");
  bool pack_on = false, pad_on = false, varlen_on = false;
  auto* pack = train->add_flag("--pack", pack_on,
                               "Pack whole documents into each sequence (attention and positions "
                               "per document; a document longer than a sequence is split)");
  auto* pad = train->add_flag("--pad", pad_on, "One document per sequence, padded to --seq-len");
  pack->excludes(pad);
  train->add_flag("--varlen", varlen_on,
                  "Each microbatch as long as its longest sequence, in multiples of --granule");
  auto* granule =
      train->add_option("--granule", o.train.granule, "--varlen's length multiple (default 1)");
  bool no_buckets = false;
  auto* unbucketed = train->add_flag(
      "--no-length-buckets", no_buckets,
      "--varlen: cut the step's rows into microbatches in data order, not grouped by length");
  auto* replan = train->add_flag("--replan-lengths", o.replan_lengths,
                                 "Order each step's microbatches for their --varlen lengths");
  train->add_option("--replan-costs", o.replan_costs, "--replan-lengths's cost file")
      ->needs(replan);

  auto* eval = app.add_option_group("validation", "Validation (docs/pprun.md: Validation)");
  eval->add_option("--eval-data", o.eval_data,
                   "Evaluate on this held-out data file (read as --data-format says): "
                   "forward-only passes of the plan, eval_loss in --metrics and the progress");
  eval->add_option("--eval-every", o.eval_every,
                   "Evaluate after every N steps too (default 0: only after the last step)");
  eval->add_option("--eval-batches", o.eval_batches,
                   "Global batches of held-out sequences per evaluation (default: the whole "
                   "batches the file holds, 1 to 20)");
  eval->add_flag(
      "--eval-only", o.eval_only,
      std::string("Evaluate the model as it starts (") +
          (o.family.reads_hugging_face() ? "fresh, --init-from or --resume" : "fresh or --resume") +
          ") on --eval-data once, and train nothing: no optimizer step, no checkpoint "
          "written");

  auto* out = app.add_option_group("output");
  out->add_option("--metrics", o.out.metrics_path, "Write JSON lines per step to FILE");
  out->add_option("--trace", o.out.trace_path,
                  "Write a Chrome trace of the real execution to FILE");
  out->add_option("--profile", o.out.profile_path,
                  "Write the measured costs (per stage F/B/I/W times, memory; per boundary "
                  "messages) to FILE, a cost file for ppcompile --cost");
  out->add_option("--dump-params", o.out.dump_dir,
                  "Write every parameter, keyed by global name, to DIR");
  out->add_option("--progress", o.progress, "auto, bar, lines or none")->capture_default_str();
  out->add_option("--log-every", o.out.log_every,
                  "Log a line every N steps (default: about 20 lines)");

  auto* ckpt = app.add_option_group("checkpoints", "Checkpoints (docs/checkpoints.md)");
  ckpt->add_option("--save", o.save_dir,
                   "Write a checkpoint to DIR at the end (and every --save-every steps)");
  ckpt->add_option("--save-every", o.save_every,
                   "Also save every N steps (default: only at the end)");
  train->add_option("--stop-after", o.stop_after,
                    "Stop once N steps are done, as an interrupted job would (--steps still sets "
                    "the learning-rate schedule); resume later with --resume");
  ckpt->add_option("--keep", o.keep, "Keep the newest K checkpoints in DIR (default: all)");
  ckpt->add_flag("--save-async", o.save_async,
                 "Write checkpoints in the background: training pauses only to copy the "
                 "parameters and AdamW moments to host memory");
  ckpt->add_option("--resume", o.resume_dir,
                   "Start from the latest complete checkpoint in DIR (any plan of the same model) "
                   "and train on to --steps in all; 'auto': from the latest in --save DIR if "
                   "there is one, else from the start (for jobs that their launcher restarts)")
      ->type_name("DIR|auto");
  // The model's weights: one file, or a Hugging Face directory (Model::hugging_face), and back
  // (Family::from_hugging_face).
  ckpt->add_option("--export", o.export_args,
                   "Write the model weights of checkpoint DIR into one safetensors file OUT, and "
                   "exit")
      ->expected(2)
      ->type_name("DIR OUT");
  ckpt->add_option("--format", o.export_format,
                   "--export: safetensors (one file OUT) or hf (a Hugging Face directory OUT: "
                   "config.json and safetensors shards, docs/huggingface.md)")
      ->check(CLI::IsMember({"safetensors", "hf"}))
      ->capture_default_str();
  ckpt->add_option("--max-shard-size", o.max_shard_size,
                   "--export --format hf: shard above this size (5GB, 500MB, 2GiB)")
      ->capture_default_str();
  if (o.family.reads_hugging_face())
    ckpt->add_option("--init-from", o.init_from,
                     "Start from the weights of a Hugging Face model directory (config.json and "
                     "safetensors, docs/huggingface.md)");

  auto* exec = app.add_option_group("execution");
  exec->add_option("--dp", o.dp,
                   "Data-parallel replicas of the plan's pipeline: pp x N ranks in all "
                   "(docs/pprun.md: rank order)")
      ->capture_default_str();
  exec->add_option("--ep", o.ep,
                   "Expert parallelism: each MoE layer's routed experts sharded over N of the "
                   "--dp replicas (docs/pprun.md: expert parallelism)")
      ->capture_default_str();
  exec->add_option("--device", o.device, "cpu (Gloo) or cuda (NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  exec->add_option("--timeout", o.timeout_s,
                   "Seconds a rank waits for a peer before giving up, in the first step (and "
                   "the one after a save or an evaluation) and outside the steps")
      ->capture_default_str();
  exec->add_option("--step-timeout", o.step_timeout_s,
                   "Seconds a rank waits for a peer in the other steps (default 0: ten times the "
                   "slowest step so far, at least 10 s, at most --timeout)")
      ->capture_default_str();
  exec->add_option("--threads", o.threads,
                   "Intra-op threads per rank (default: cores / ranks on this machine)");
  app.add_option("--fault-kill", o.fault_kill,
                 "Testing: rank R kills itself (SIGKILL) in the middle of step S (R:S), or "
                 "during the save after it (R:S:save, R:S:commit), or hangs there in a host call "
                 "that never returns (R:S:hang)")
      ->group("");  // hidden
  app.add_option("--fault-slow", o.fault_slow,
                 "Testing: rank R's compute actions take F times as long (R:F), a straggler")
      ->group("");  // hidden

  if (auto stop = parse_flags(app, argc, argv, program)) return *stop;
  o.train.data_format = *parse_data_format(data_format);  // checked above
  o.train.rows = pack_on ? RowMode::Pack : pad_on ? RowMode::Pad : RowMode::Windows;
  if (granule->count() && !varlen_on) {
    std::cerr << program << ": error: --granule: needs --varlen\n";
    return 2;
  }
  if (granule->count() && o.train.granule < 1) {
    std::cerr << program << ": error: --granule: " << o.train.granule << " is not a length\n";
    return 2;
  }
  if (unbucketed->count() && !varlen_on) {
    std::cerr << program << ": error: --no-length-buckets: needs --varlen\n";
    return 2;
  }
  o.train.length_buckets = !no_buckets;
  if (varlen_on && o.train.granule == 0) o.train.granule = 1;
  o.train.overlap = overlap == "on";
  o.seed_given = seed->count() > 0;
  std::error_code ec;
  o.exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) o.exe = argv[0];
  o.args.assign(argv + 1, argv + argc);
  return std::nullopt;
}

int run_command_line(const RunOptions& o, const char* program) {
  const char* rank = std::getenv("RANK");
  const std::string who = rank ? std::string("rank ") + rank + ": " : "";
  try {
    return run(o, [](const char* name) { return static_cast<const char*>(std::getenv(name)); });
  } catch (const ppc::UserError& e) {
    std::cerr << program << ": " << who << "error: " << e.format() << '\n';
    return 2;
  } catch (const RunFailure& e) {
    std::cerr << program << ": " << e.what() << '\n';
    return 1;
  } catch (const ppc::InternalError& e) {
    std::cerr << program << ": " << who << e.what() << "\n(this is a bug in " << program
              << "; please report it)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << who << "error: " << e.what() << '\n';
    return 1;
  }
}

int main_of(int argc, char** argv, Family family, const char* program) {
  const std::string name =
      program ? program : std::filesystem::path(argc > 0 ? argv[0] : "pprt").filename().string();
  set_program_name(name);  // every status and error line of the process starts with it
  RunOptions o;
  o.family = std::move(family);
  if (auto stop = parse_command_line(argc, argv, name.c_str(), o)) return *stop;
  return run_command_line(o, name.c_str());
}

}  // namespace pprt
