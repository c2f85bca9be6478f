// main.cpp: the facegen command line: a trained DCGAN generator + latent vectors -> images.
//
//   facegen --model network.bin --input inputs/input1.txt --output outputs/output1
//   facegen --model network.bin --random 64 --seed 7 --output outputs/samples
//
// writes outputs/output1.txt and outputs/output1.bmp. Exit status: 0 success, 1 a problem with the
// input (files, values, flags: one sentence on stderr), 2 a malformed command line, 3 a fault of the
// program or its environment (CUDA, memory), 128 + S ended by signal S (130 SIGINT, 143 SIGTERM,
// 129 SIGHUP, ...; temporary files removed, existing outputs untouched: files/stop_signals.hpp).
#include <cxxopts.hpp>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <thread>

#include "files/stop_signals.hpp"
#include "common/errors.hpp"
#include "run/pipeline.hpp"
#include "app/progress.hpp"
#include "common/text_format.hpp"
#include "common/build_info.hpp"
#include "mpi/launch.hpp"
#include "mpi/rank_job.hpp"

namespace {

using facegen::DeviceKind;

using facegen::kExitInput;
using facegen::kExitUsage;
using facegen::kExitFault;

// The shipped model, found from the program's own location: <dir>/../models/ in the source tree
// (build/facegen), <dir>/../share/facegen/models/ where make install put it (PREFIX/bin/facegen).
// Returned without "..": the summary names the file, not the way to it.
std::string default_model_path() {
  const std::string shipped = "models/facegen-fashion.bin";
  char exe[4096];
  const ssize_t length = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (length <= 0) return shipped;
  std::string dir(exe, static_cast<size_t>(length));
  dir = dir.substr(0, dir.find_last_of('/'));
  for (const std::string& candidate : {dir + "/../" + shipped, dir + "/../share/facegen/" + shipped}) {
    char resolved[PATH_MAX];
    if (::realpath(candidate.c_str(), resolved) != nullptr) return resolved;
  }
  return dir + "/../" + shipped;  // missing: the loader names this path
}

DeviceKind parse_device(const std::string& name) {
  if (name == "auto") return DeviceKind::Auto;
  if (name == "cuda" || name == "gpu") return DeviceKind::Cuda;
  if (name == "cpu") return DeviceKind::Cpu;
  if (name == "synthetic") return DeviceKind::Synthetic;
  throw facegen::UserError("unknown --device '" + name + "' (expected auto, cuda or cpu)");
}

// Descriptors 0, 1 and 2 closed by whoever started us would be handed out to the first files we
// open, and a message meant for stderr would land in an output. Each closed one gets /dev/null,
// opened read-only: reading stdin gives an empty input, and writing to stdout or stderr fails (as it
// would have on the closed descriptor) instead of vanishing.
void occupy_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int opened = ::open("/dev/null", O_RDONLY);  // the lowest free descriptor: fd itself
    if (opened != fd) ::_exit(kExitFault);             // no /dev/null: nothing can be said or trusted
  }
}

// "1.234 s (810 images/s, 95.3 MB/s)"; the rates are left out where they mean nothing.
std::string timing(double seconds, int64_t images, double bytes) {
  char text[128];
  int n = std::snprintf(text, sizeof text, "%.3f s", seconds);
  if (seconds > 0) {
    n += std::snprintf(text + n, sizeof text - n, " (%.0f images/s", static_cast<double>(images) / seconds);
    if (bytes > 0) n += std::snprintf(text + n, sizeof text - n, ", %.1f MB/s", bytes / 1e6 / seconds);
    std::snprintf(text + n, sizeof text - n, ")");
  }
  return text;
}

int64_t int_flag(const cxxopts::ParseResult& args, const char* name, int64_t low, int64_t high) {
  const int64_t value = args[name].as<int64_t>();
  if (value < low || value > high) {
    throw facegen::UserError("--" + std::string(name) + " must be between " + std::to_string(low) + " and " +
                             std::to_string(high) + ", got " + std::to_string(value));
  }
  return value;
}

}  // namespace

int run_command_line(int argc, char** argv) {
  cxxopts::Options options("facegen", "Generates 64x64 RGB images from latent vectors with a DCGAN generator.");
  options.add_options()
      ("m,model", "generator weights, SHPC facegen network.bin layout (default: the shipped "
       "models/facegen-fashion.bin)", cxxopts::value<std::string>())
      ("i,input", "latent file: N, then N*100 numbers", cxxopts::value<std::string>())
      ("r,random", "instead of --input: N latents drawn from N(0, 1)", cxxopts::value<int64_t>())
      ("interpolate", "instead of --input: a K x K grid, each row K steps between two random latents",
       cxxopts::value<int64_t>())
      ("s,seed", "seed of --random and --interpolate (same seed, same images)",
       cxxopts::value<uint64_t>()->default_value("1"))
      ("o,output", "output prefix: writes PREFIX.txt, PREFIX.bmp, ...", cxxopts::value<std::string>())
      ("f,formats", "outputs to write: comma-separated txt, bmp, npy, png (PREFIX/000000.png, ...), mosaic-png",
       cxxopts::value<std::string>()->default_value("txt,bmp"))
      ("mosaic-tiles", "largest mosaic, in tiles per side; more images split into PREFIX-0001.bmp, ...",
       cxxopts::value<int64_t>()->default_value("128"))
      ("chunk", "images read, generated and written per step (memory grows with it, not with N)",
       cxxopts::value<int64_t>()->default_value("1024"))
      ("write-threads", "threads that format text and encode PNGs (0: all)",
       cxxopts::value<int64_t>()->default_value("0"))
      ("d,device", "auto, cuda or cpu (auto: a usable GPU, else the CPU); synthetic: test images, not the network",
       cxxopts::value<std::string>()->default_value("auto"))
      ("g,gpu", "CUDA device index", cxxopts::value<int>()->default_value("0"))
      ("p,precision", "GPU arithmetic: fp32 (exact float32), tf32 or bf16 (tensor cores)",
       cxxopts::value<std::string>()->default_value("fp32"))
      ("b,batch", "images per GPU batch", cxxopts::value<int>()->default_value("512"))
      ("t,threads", "CPU threads (0: all)", cxxopts::value<int>()->default_value("0"))
      ("q,quiet", "print nothing but errors (no progress bar, no summary)")
      ("verbose", "under mpirun/srun: every rank reports its host, rank, local rank and GPU")
      ("all-ranks", "under mpirun/srun: every rank generates, however few images there are")
      ("min-images-per-rank", "under mpirun/srun: ranks sit out unless each gets this many images "
       "(0: 4096 on GPUs, 8 on CPUs)", cxxopts::value<int64_t>()->default_value("0"))
      ("images-per-round", "under mpirun/srun: the most images a rank holds at once (0: max(1024, --batch))",
       cxxopts::value<int64_t>()->default_value("0"))
      ("mpi", "run as one rank of an MPI job even where no launcher is detected")
      ("h,help", "print this help")
      ("V,version", "print the version");

  // Under mpirun or srun every rank parses the same command line: let one of them complain.
  const facegen::mpi::Launch launch = facegen::mpi::detect_launch();
  if (!facegen::mpi::prints_shared_messages(launch)) {
    std::cerr.setstate(std::ios::failbit);
  }
  try {
    auto args = options.parse(argc, argv);
    if (args.count("help")) {
      std::cout << options.help() << "\nExit status: 0 success, 1 bad input, 2 bad command line, 3 internal or device fault.\n";
      return 0;
    }
    if (args.count("version")) {
      std::cout << facegen::version_text();
      return 0;
    }
    if (!args.unmatched().empty()) {
      std::cerr << "facegen: unexpected argument '" << args.unmatched().front() << "' (see --help)\n";
      return kExitUsage;
    }
    const int sources = static_cast<int>(args.count("input") + args.count("random") + args.count("interpolate"));
    if (sources != 1) {
      std::cerr << "facegen: give exactly one of --input FILE, --random N, --interpolate K (see --help)\n";
      return kExitUsage;
    }
    const bool synthetic = args["device"].as<std::string>() == "synthetic";
    if (!args.count("output")) {
      std::cerr << "facegen: missing --output (see --help)\n";
      return kExitUsage;
    }

    facegen::GenerateRequest request;
    if (args.count("model")) {
      request.model_path = args["model"].as<std::string>();
    } else if (!synthetic) {
      request.model_path = default_model_path();
    }
    if (args.count("input")) request.latents.path = args["input"].as<std::string>();
    request.latents.seed = args["seed"].as<uint64_t>();
    if (args.count("random")) {
      request.latents.random_count = args["random"].as<int64_t>();
      if (request.latents.random_count < 1)
        throw facegen::UserError("--random must be at least 1, got " + std::to_string(request.latents.random_count));
    }
    if (args.count("interpolate")) {
      request.latents.interpolate_side = args["interpolate"].as<int64_t>();
      if (request.latents.interpolate_side < 1 || request.latents.interpolate_side > 1000)
        throw facegen::UserError("--interpolate must be between 1 and 1000, got " +
                                 std::to_string(request.latents.interpolate_side));
    }
    request.output_prefix = args["output"].as<std::string>();
    request.formats = facegen::parse_formats(args["formats"].as<std::string>());
    request.backend.device = parse_device(args["device"].as<std::string>());
    request.backend.cuda_device = args["gpu"].as<int>();
    request.backend.precision = facegen::parse_precision(args["precision"].as<std::string>());
    request.backend.max_batch = args["batch"].as<int>();
    request.backend.threads = args["threads"].as<int>();
    if (request.backend.max_batch < 1 || request.backend.max_batch > (1 << 20)) {
      throw facegen::UserError("--batch must be between 1 and 1048576, got " + std::to_string(request.backend.max_batch));
    }
    if (request.backend.threads < 0 || request.backend.threads > 4096) {
      throw facegen::UserError("--threads must be between 0 and 4096, got " + std::to_string(request.backend.threads));
    }
    if (request.backend.cuda_device < 0) {
      throw facegen::UserError("--gpu must be 0 or more, got " + std::to_string(request.backend.cuda_device));
    }
    request.sinks.mosaic_tiles = static_cast<int>(int_flag(args, "mosaic-tiles", 1, facegen::kMaxMosaicTiles));
    request.sinks.threads = static_cast<int>(int_flag(args, "write-threads", 0, 4096));
    request.chunk_images = std::max<int64_t>(int_flag(args, "chunk", 1, 1 << 20), request.backend.max_batch);
    const bool quiet = args.count("quiet") > 0;

    request.on_notice = [](const std::string& notice) { std::cerr << "facegen: " << notice << "\n"; };
    if (launch.kind == facegen::mpi::LaunchKind::Unusable) {
      std::cerr << "facegen: " << launch.problem << "\n";
      return kExitUsage;
    }
    if (launch.kind == facegen::mpi::LaunchKind::Rank || args.count("mpi")) {
      if (args.count("gpu")) {
        throw facegen::UserError("--gpu picks the GPU of a single-process run; the ranks of a parallel job pick theirs "
                                 "by node-local rank (limit them with CUDA_VISIBLE_DEVICES)");
      }
      for (facegen::OutputFormat format : request.formats) {
        if (format == facegen::OutputFormat::Png || format == facegen::OutputFormat::MosaicPng) {
          throw facegen::UserError(std::string("--formats ") + facegen::format_name(format) +
                                   " is written by single-process runs only; a parallel run writes txt, bmp and npy");
        }
      }
      facegen::mpi::RankJobOptions rank_options;
      rank_options.verbose = args.count("verbose") > 0;
      rank_options.quiet = quiet;
      rank_options.all_ranks = args.count("all-ranks") > 0;
      rank_options.min_images_per_rank = args["min-images-per-rank"].as<int64_t>();
      if (rank_options.min_images_per_rank < 0) {
        throw facegen::UserError("--min-images-per-rank must be 0 or more, got " +
                                 std::to_string(rank_options.min_images_per_rank));
      }
      const int64_t per_round = args["images-per-round"].as<int64_t>();
      if (per_round < 0 || per_round > (int64_t{1} << 20)) {
        throw facegen::UserError("--images-per-round must be between 0 and 1048576, got " + std::to_string(per_round));
      }
      if (per_round > 0) request.chunk_images = per_round;
      std::cerr.clear();  // from here on each rank reports its own errors, naming itself
      return facegen::mpi::run_as_rank(request, rank_options);
    }

    facegen::ProgressBar progress(stderr, facegen::progress_wanted(2, quiet));
    request.on_progress = [&](int64_t done, int64_t total) { progress.update(done, total); };
    facegen::GenerateReport report;
    try {
      report = facegen::run_generation(request);
    } catch (...) {
      progress.finish();
      throw;
    }
    progress.finish();
    if (!quiet) {
      struct stat input_stat;
      const double input_bytes = !request.latents.path.empty() && ::stat(request.latents.path.c_str(), &input_stat) == 0
                                     ? static_cast<double>(input_stat.st_size)
                                     : 0;
      double written_bytes = 0;
      for (int64_t bytes : report.output_bytes) written_bytes += static_cast<double>(bytes);
      const int64_t n = report.images;
      std::printf("model     %s\n", request.model_path.empty() ? "(none)" : request.model_path.c_str());
      std::printf("input     %s: %lld images\n", report.latents.c_str(), static_cast<long long>(n));
      std::printf("backend   %s\n", report.backend.c_str());
      std::printf("parse     %s\n", timing(report.parse_seconds, n, input_bytes).c_str());
      std::printf("generate  %s, not counting reading and writing files\n",
                  timing(report.compute_seconds, n, 0).c_str());
      std::printf("write     %s, on a writer thread beside generation; generation waited %.3f s for it\n",
                  timing(report.write_seconds, n, written_bytes).c_str(), report.write_wait_seconds);
      std::printf("total     %s from start to finished files, model load %.3f s, peak memory %s\n",
                  timing(report.total_seconds, n, 0).c_str(), report.load_seconds,
                  facegen::human_bytes(static_cast<double>(facegen::peak_resident_bytes())).c_str());
      for (size_t k = 0; k < report.outputs.size(); ++k) {
        std::printf("wrote     %s (%s)\n", report.outputs[k].c_str(),
                    facegen::human_bytes(static_cast<double>(report.output_bytes[k])).c_str());
      }
    }
    return 0;
  } catch (const cxxopts::exceptions::exception& e) {
    std::cerr << "facegen: " << e.what() << " (see --help)\n";
    return kExitUsage;
  } catch (const facegen::UserError& e) {
    std::cerr << "facegen: error: " << e.what() << "\n";
    return kExitInput;
  } catch (const std::bad_alloc&) {
    std::cerr << "facegen: fault: out of host memory (try a smaller --batch)\n";
    return kExitFault;
  } catch (const std::exception& e) {
    std::cerr << "facegen: fault: " << e.what() << "\n";
    return kExitFault;
  }
}

// What the program printed to stdout (the summary, --help) is part of its result: a stdout that
// could not take it (a full disk, a closed descriptor) fails the run with status 1, like an output
// file that could not be written; the output files themselves are already in place.
int main(int argc, char** argv) {
  occupy_standard_descriptors();
  facegen::install_stop_handlers(facegen::StopStyle::Message);
  const int status = run_command_line(argc, argv);
  std::cout.flush();
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (status == 0 && (!flushed || std::ferror(stdout) || !std::cout.good())) {
    std::fprintf(stderr, "facegen: error: cannot write to standard output: %s\n",
                 flushed ? "a write failed" : std::strerror(err));
    return kExitInput;
  }
  return status;
}
