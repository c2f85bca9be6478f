// main.cpp: the facegen command line: a trained DCGAN generator + latent vectors -> images.
//
//   facegen --model network.bin --input inputs/input1.txt --output outputs/output1
//   facegen --model network.bin --random 64 --seed 7 --output outputs/samples
//   facegen --model network.bin --seeds 0-99,500 --output outputs/seeds
//
// writes outputs/output1.txt and outputs/output1.bmp. Exit status: 0 success, 1 a problem with the
// input (files, values, flags: one sentence on stderr), 2 a malformed command line, 3 a fault of the
// program or its environment (CUDA, memory), 128 + S ended by signal S (130 SIGINT, 143 SIGTERM,
// 129 SIGHUP, ...; temporary files removed, existing outputs untouched: common/stop_signals.hpp).
#include <cxxopts.hpp>
#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "app/flag_rules.hpp"
#include "commit/commit_journal.hpp"
#include "formats/output_format.hpp"
#include "commit/output_guard.hpp"
#include "common/path_parts.hpp"
#include "commit/prefix_lock.hpp"
#include "latents/seed_list.hpp"
#include "common/stop_signals.hpp"
#include "common/errors.hpp"
#include "common/stack_room.hpp"
#include "run/pipeline.hpp"
#include "run/resume_job.hpp"
#include "run/progress.hpp"
#include "run/summary.hpp"
#include "common/text_format.hpp"
#include "common/build_info.hpp"
#include "common/command_line.hpp"
#include "mpi/launch.hpp"
#include "mpi/launcher_watch.hpp"
#include "mpi/rank_job.hpp"
#include "serve/serve_main.hpp"

namespace {

using facegen::DeviceKind;

using facegen::kExitInput;
using facegen::kExitUsage;
using facegen::kExitRolledBack;
using facegen::kExitFault;

// The shipped model, found from the program's own location: <dir>/../models/ in the source tree
// (build/facegen), <dir>/../share/facegen/models/ where make install put it (PREFIX/bin/facegen).
// Returned without "..": the summary names the file, not the way to it.
std::string default_model_path() {
  const std::string shipped = "models/facegen-faces.safetensors";
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
  if (name == "cuda") return DeviceKind::Cuda;
  if (name == "cpu") return DeviceKind::Cpu;
  if (name == "synthetic") return DeviceKind::Synthetic;
  throw facegen::UserError("unknown --device '" + name + "' (expected auto, cuda, cpu or synthetic; cuda is the NVIDIA GPU)");
}

// One line on stderr in one write: a parallel job's launcher merges its ranks' stderr, and would split
// a line written in parts (std::cerr writes each << at once).
void say(const std::string& line) {
  const std::string text = line + "\n";
  std::cerr.write(text.data(), static_cast<std::streamsize>(text.size())).flush();
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

// Numeric flags are read as text and parsed here, so that a bad value names its flag
// ("--random expects a whole number, got 'abc'") rather than only the value.
int64_t int_flag(const cxxopts::ParseResult& args, const char* name, int64_t low, int64_t high) {
  const std::string text = args[name].as<std::string>();
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    throw facegen::UserError("--" + std::string(name) + " expects a whole number, got '" + text + "'");
  }
  if (value < low || value > high) {
    throw facegen::UserError("--" + std::string(name) + " must be between " + std::to_string(low) + " and " +
                             std::to_string(high) + ", got " + std::to_string(value));
  }
  return value;
}

// --grid-columns and --grid-padding: the mosaics' grid, refused where no mosaic is written.
void grid_flags(const cxxopts::ParseResult& args, const std::vector<facegen::OutputFormat>& formats,
                facegen::SinkOptions* sinks) {
  const bool mosaic = std::count(formats.begin(), formats.end(), facegen::OutputFormat::Bmp) +
                          std::count(formats.begin(), formats.end(), facegen::OutputFormat::MosaicPng) > 0;
  for (const char* name : {"grid-columns", "grid-padding"}) {
    if (args.count(name) && !mosaic) {
      throw facegen::UserError("--" + std::string(name) +
                               " lays out the mosaic formats (bmp, mosaic-png), but --formats asks for none of them");
    }
  }
  if (args.count("grid-columns")) sinks->grid_columns = int_flag(args, "grid-columns", 1, INT32_MAX);
  sinks->grid_padding = int_flag(args, "grid-padding", 0, facegen::kMaxGridPadding);
}

// --shard-images: refused where no format is sharded.
void shard_flag(const cxxopts::ParseResult& args, const std::vector<facegen::OutputFormat>& formats,
                facegen::SinkOptions* sinks) {
  if (!args.count("shard-images")) return;
  if (std::none_of(formats.begin(), formats.end(), facegen::is_sharded_format)) {
    throw facegen::UserError("--shard-images splits the formats tar, npy and npy-u8, but --formats asks for none of them");
  }
  sinks->shard_images = int_flag(args, "shard-images", 1, facegen::kMaxShardImages);
}

// --png-level: how hard the PNG formats compress, refused where no PNG is written.
void png_level_flag(const cxxopts::ParseResult& args, const std::vector<facegen::OutputFormat>& formats,
                    facegen::SinkOptions* sinks) {
  if (!args.count("png-level")) return;
  const bool png = std::count(formats.begin(), formats.end(), facegen::OutputFormat::Png) +
                       std::count(formats.begin(), formats.end(), facegen::OutputFormat::MosaicPng) +
                       std::count(formats.begin(), formats.end(), facegen::OutputFormat::Tar) > 0;
  if (!png) {
    throw facegen::UserError("--png-level sets the formats that hold PNGs (png, mosaic-png, tar), but --formats asks "
                             "for none of them");
  }
  sinks->png_level = static_cast<int>(int_flag(args, "png-level", 0, facegen::kMaxPngLevel));
}

// --png-layout: where the png format's files lie in its folder, refused where no png folder is written.
facegen::PngLayout png_layout_flag(const cxxopts::ParseResult& args, const std::vector<facegen::OutputFormat>& formats) {
  if (!args.count("png-layout")) return facegen::PngLayout::Flat;
  if (std::count(formats.begin(), formats.end(), facegen::OutputFormat::Png) == 0) {
    throw facegen::UserError("--png-layout lays out the png format's folder, but --formats asks for no png");
  }
  return facegen::parse_png_layout(args["png-layout"].as<std::string>(), "--png-layout");
}

uint64_t seed_flag(const cxxopts::ParseResult& args) {
  const std::string text = args["seed"].as<std::string>();
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] == '-' || *end != '\0' || errno == ERANGE) {
    throw facegen::UserError("--seed expects a whole number from 0 to 18446744073709551615, got '" + text + "'");
  }
  return value;
}

// --seeds LIST; --seed beside it is refused rather than ignored, since each image takes its seed from the list.
std::shared_ptr<const facegen::SeedList> seeds_flag(const cxxopts::ParseResult& args) {
  if (args.count("seed")) {
    throw facegen::UserError("--seed applies to --random and --interpolate; with --seeds each image's seed comes "
                             "from the list (for seed S alone, --seeds S)");
  }
  return std::make_shared<const facegen::SeedList>(facegen::SeedList::parse(args["seeds"].as<std::string>()));
}

// --truncation T: drawn latents within [-T, T] (common/latent_draw.hpp); 0 where not given. Any T > 0
// is taken: from 8.58 up no draw lies outside, and the latents are the untruncated ones exactly.
double truncation_flag(const cxxopts::ParseResult& args) {
  if (!args.count("truncation")) return 0;
  if (args.count("input")) {
    throw facegen::UserError("--truncation applies to drawn latents (--random, --seeds, --interpolate), but --input "
                             "reads them from a file as they are");
  }
  const std::string text = args["truncation"].as<std::string>();
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value) || !(value > 0)) {
    throw facegen::UserError("--truncation expects a finite number greater than 0, got '" + text + "'");
  }
  return value;
}

double seconds_flag(const cxxopts::ParseResult& args, const char* name) {
  const std::string text = args[name].as<std::string>();
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value >= 0.1 && value <= 86400)) {
    throw facegen::UserError("--" + std::string(name) + " expects seconds from 0.1 to 86400, got '" + text + "'");
  }
  return value;
}

cxxopts::Options command_line() {
  using cxxopts::value;
  cxxopts::Options options("facegen", "Generates 64x64 RGB images from latent vectors with a DCGAN generator.");
  options.custom_help("--output PREFIX (--input PATH | --random N | --interpolate K | --seeds LIST) [options]");
  options.add_options("Input")
      ("i,input", "latent file: N, then N*100 numbers, or a .npy; - for standard input", value<std::string>(), "PATH")
      ("r,random", "instead of --input: N latents drawn from N(0, 1)", value<std::string>(), "N")
      ("interpolate", "instead of --input: a K x K grid, each row K steps between two random latents",
       value<std::string>(), "K")
      // cxxopts 3.1 keys an option by its long name and short letter joined: a bare "seeds" would be
      // "s,seed" ("seed" + "s") and the two flags one option. The letter keeps them apart.
      ("S,seeds", "instead of --input: one image per seed, as ranges and lists (0-49999, 0-99,500,1000-1009); seed "
       "S's image is --random 1 --seed S's, whatever else the list holds; a seed given twice gives its image twice",
       value<std::string>(), "LIST")
      ("s,seed", "seed of --random and --interpolate (same seed, same images)", value<std::string>()->default_value("1"),
       "S")
      ("truncation", "drawn latents (--random, --seeds, --interpolate's ends) within [-T, T]: each value redrawn "
       "from its own stream until it lies there, the same for any batch size, rank count or device",
       value<std::string>(), "T")
      ("m,model", "the generator: a safetensors file of any DCGAN generator of the family "
       "(tools/export_model.py makes one from a PyTorch state_dict) or an SHPC network.bin (default: the "
       "shipped faces model, found from the program's location)", value<std::string>(), "PATH");
  options.add_options("Output")
      ("o,output", "output prefix: writes PREFIX.txt, PREFIX.bmp, ...", value<std::string>(), "PREFIX")
      ("f,formats", "outputs to write: comma-separated txt, bmp, npy, png (PREFIX/000000.png, ...), mosaic-png, "
       "npy-u8 (PREFIX.u8.npy, uint8), tar (WebDataset shards PREFIX-000000.tar, ...)",
       value<std::string>()->default_value("txt,bmp"), "LIST")
      ("mosaic-tiles", "largest mosaic, in tiles per side; more images split into PREFIX-0001.bmp, ...",
       value<std::string>()->default_value("128"), "T")
      ("grid-columns", "mosaics (bmp, mosaic-png): C tiles per row, as torchvision's save_image(nrow=C); each "
       "file of a split is a grid of its own (default: square, ceil(sqrt(images)) a side)", value<std::string>(), "C")
      ("shard-images", "tar: samples per shard (default 10,000); npy, npy-u8: split into PREFIX-000000.npy, ... "
       "of N images each", value<std::string>(), "N")
      ("grid-padding", "mosaics: P black pixels between and around the tiles, as save_image(padding=P)",
       value<std::string>()->default_value("0"), "P")
      ("png-level", "PNG compression (png, mosaic-png, tar): 0 (the default) stores the pixels, fastest; 1 makes "
       "files 40% smaller at 1/57 of the speed; up to 12, smallest and slowest", value<std::string>(), "L")
      ("png-layout", "png: flat (the default) puts every PNG in PREFIX/; subfolders puts a thousand in each of "
       "PREFIX/000/, PREFIX/001/, ... (PREFIX/000/000000.png), which many writers fill faster",
       value<std::string>(), "L")
      ("resume", "outputs of many files only (tar, png, npy and npy-u8 with --shard-images): put each file in place "
       "as it is finished and record it in PREFIX.facegen-resume; a rerun of the same job keeps the recorded files "
       "and makes only the rest, a rerun of another job is refused")
      ("summary-json", "also write the run summary as JSON to FILE (atomically, like every output); - for "
       "standard output, which then carries the JSON instead of the summary",
       value<std::string>(), "FILE")
      ("finish-commit", "only finish the commit of a run that was killed while it put its outputs in place "
       "(DIR/.facegen-commit-*; a run into DIR does it itself): exit 0 when the run's new outputs are in "
       "place, 4 when its old ones are", value<std::string>(), "JOURNAL");
  options.add_options("Device")
      ("d,device", "auto, cuda or cpu (auto: a usable NVIDIA GPU, else the CPU with a notice); synthetic: test "
       "images, not the network", value<std::string>()->default_value("auto"), "DEVICE")
      ("g,gpu", "CUDA device index (--device cuda or auto)", value<std::string>()->default_value("0"), "N")
      ("p,precision", "GPU arithmetic: fp32 (exact float32), tf32 or bf16 (tensor cores)",
       value<std::string>()->default_value("fp32"), "P")
      ("b,batch", "images per GPU batch (a batch never spans two chunks; --device cuda or auto)",
       value<std::string>()->default_value("512"),
       "N")
      ("t,threads", "CPU threads (0: all this process may use)", value<std::string>()->default_value("0"), "N");
  options.add_options("Memory")
      ("chunk", "images of a piece, read, generated and written together (memory grows with it, not with N; "
       "default 12 MiB: 256 float or 1024 8-bit images)", value<std::string>(), "N")
      ("write-threads", "threads that format text and encode PNGs and tar members (0: all)",
       value<std::string>()->default_value("0"),
       "N");
  options.add_options("Reporting")
      ("q,quiet", "print nothing but errors (no notice, no progress, no summary)")
      ("progress-every", "where stderr is not a terminal: a progress line every SECONDS (runs shorter than that "
       "print none)", value<std::string>()->default_value("10"), "SECONDS")
      ("h,help", "print this help")
      ("V,version", "print the version, the commit and what this build has (CUDA, MPI, CPU)");
  options.add_options("MPI")
      ("verbose", "under mpirun or srun (or with --mpi): every rank reports its host, rank, local rank and GPU")
      ("all-ranks", "every rank generates, however few images there are")
      ("min-images-per-rank", "ranks sit out unless each gets this many images (0: 4096 on GPUs, 8 on CPUs)",
       value<std::string>()->default_value("0"), "N")
      ("images-per-round", "MPI: --chunk under another name, a rank's piece (0: --chunk)",
       value<std::string>()->default_value("0"), "N")
      ("mpi", "run as one rank of an MPI job even where no launcher is detected");
  return options;
}

// --finish-commit JOURNAL: one line on stderr saying which outputs are in place.
int finish_commit_command(const std::string& journal) {
  const facegen::FinishReport report = facegen::finish_commit(journal);
  const std::string outputs = facegen::outputs_named(report);
  // The killed run's prefix lock, which no process holds now.
  if (report.outcome != facegen::FinishOutcome::Busy && !report.first_final.empty()) {
    facegen::remove_unheld_lock(facegen::directory_of(journal), report.first_final);
  }
  switch (report.outcome) {
    case facegen::FinishOutcome::Busy:
      throw facegen::UserError(journal + " belongs to a commit under way: its process still holds it");
    case facegen::FinishOutcome::OldInPlace:
      say("facegen: a new output of the commit that " + journal + " recorded is gone; the commit was undone: " +
          outputs + " are as they were before that run");
      return kExitRolledBack;
    case facegen::FinishOutcome::NewInPlace:
      say("facegen: " +
          (report.was_done ? "the commit that " + journal + " recorded had finished: "
                           : "finished the commit that " + journal + " recorded: ") +
          "the new " + outputs + " are in place" + facegen::left_named(report));
      return 0;
  }
  return 0;
}

const std::vector<std::string> kHelpGroups = {"Input", "Output", "Device", "Memory", "Reporting",
                                              "MPI"};

}  // namespace

// Under an address-space limit (ulimit -v), glibc cannot reserve the 64 MiB of address space a
// thread's own malloc arena takes, and that thread then maps every allocation on its own: PNG
// encoding ran about 100 times slower. One shared arena keeps such a run at its speed, and a real
// shortage then fails an allocation (exit 3) instead of crawling.
void share_malloc_arena_under_address_limit() {
  struct rlimit limit;
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) ::mallopt(M_ARENA_MAX, 1);
}

// Whether the stack may grow as far as the program needs (common/stack_room.hpp); if not, one rank
// of a parallel job says why, and the run ends with status 1. Called before the command line is
// parsed: its regular expressions alone overflow a 16 KiB stack.
bool stack_room_or_say(const facegen::mpi::Launch& launch) {
  try {
    facegen::ensure_stack_room();
    return true;
  } catch (const facegen::UserError& e) {
    if (facegen::mpi::prints_shared_messages(launch)) say(std::string("facegen: error: ") + e.what());
    return false;
  }
}

// Before the static objects of every file (the command-line parser's regular expressions are among
// them, and fail to allocate under a small ulimit -v).
[[gnu::constructor(101)]] void end_faults_in_one_line_from_the_start() { facegen::end_faults_in_one_line(); }

// Whether `output` names the same file as `input` (both exist and share device and inode).
bool same_file(const std::string& output, const struct stat& input) {
  struct stat existing;
  return ::stat(output.c_str(), &existing) == 0 && existing.st_dev == input.st_dev && existing.st_ino == input.st_ino;
}

// A file the run reads, which no output may replace.
struct ReadFile {
  std::string what;  // "input file", "model file"
  std::string path;
};

void refuse_overwriting(const std::string& prefix, const std::vector<facegen::OutputFormat>& formats,
                        const ReadFile& read);

// An empty prefix or one naming a folder would write hidden files (".txt", "dir/.bmp"); a prefix
// whose outputs, in the formats asked for, include a file the run reads (its input, its model) would
// replace it (PREFIX.txt for txt, a numbered mosaic PREFIX-0001.bmp, the folder PREFIX/ of per-image
// PNGs that holds it, ...). Both are refused in one sentence.
void check_output_prefix(const std::string& prefix, const std::vector<ReadFile>& read_files,
                         const std::vector<facegen::OutputFormat>& formats, facegen::PngLayout png_layout,
                         bool named_by_seed) {
  const std::string last = prefix.substr(prefix.find_last_of('/') == std::string::npos ? 0 : prefix.find_last_of('/') + 1);
  if (last.empty() || last == "." || last == "..") {
    throw facegen::UserError("--output takes a path prefix such as outputs/run1 (it writes outputs/run1.txt, ...), got '" +
                             prefix + "', which names a folder");
  }
  if (last.compare(0, 9, ".facegen-") == 0) {
    throw facegen::UserError("--output " + prefix + " begins as facegen's own journals, backups and locks are named "
                             "(.facegen-...); choose another prefix");
  }
  // Every output name is the prefix's last part and at least 4 more bytes (".txt"); longer ones
  // (numbered mosaics) are checked as their files are created.
  const size_t slash = prefix.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : prefix.substr(0, slash);
  const size_t name_bytes = prefix.size() - (slash == std::string::npos ? 0 : slash + 1);
  const long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max > 0 && name_bytes + 4 > static_cast<size_t>(name_max)) {
    throw facegen::UserError("--output " + prefix + " ends in a name of " + std::to_string(name_bytes) +
                             " bytes, too long for its outputs (name + \".txt\") in " + dir + ", whose limit is " +
                             std::to_string(name_max) + " bytes a name");
  }
  // PATH_MAX counts the terminating NUL: a path of at most PATH_MAX - 1 bytes can be opened.
  // The longest path the formats make from the prefix: PREFIX.txt, or PREFIX/000000.png (png; by seed
  // the longest seed's name) and the scratch PREFIX.png.pixels (mosaic-png); a numbered mosaic's is
  // checked as its file is created.
  facegen::SampleFacts naming;
  naming.named_by_seed = named_by_seed;
  naming.image_seed = [](int64_t) { return std::numeric_limits<uint64_t>::max(); };
  std::string longest = ".txt";
  for (facegen::OutputFormat format : formats) {
    if (format == facegen::OutputFormat::Png) longest = "/" + facegen::png_relative_path(0, 1, png_layout, naming);
    if (format == facegen::OutputFormat::MosaicPng) longest = longest.size() > 4 ? longest : ".png.pixels";
  }
  const long path_max = ::pathconf(dir.c_str(), _PC_PATH_MAX);
  if (path_max > 0 && prefix.size() + longest.size() + 1 > static_cast<size_t>(path_max)) {
    const std::string shown = prefix.size() <= 80 ? prefix : prefix.substr(0, 50) + "..." + prefix.substr(prefix.size() - 27);
    throw facegen::UserError("--output " + shown + " is a path of " + facegen::with_commas(static_cast<int64_t>(prefix.size())) +
                             " bytes, too long for its outputs (path + \"" + longest + "\"): the limit is " +
                             facegen::with_commas(path_max - 1) + " bytes a path");
  }
  for (const ReadFile& read : read_files) refuse_overwriting(prefix, formats, read);
}

// Refuses a prefix whose outputs include the file `read` (the run's input or model).
void refuse_overwriting(const std::string& prefix, const std::vector<facegen::OutputFormat>& formats,
                        const ReadFile& read) {
  const std::string& input_path = read.path;
  struct stat input;
  if (input_path.empty() || ::stat(input_path.c_str(), &input) != 0) return;
  auto refuse = [&](const std::string& output) {
    throw facegen::UserError("--output " + prefix + " would overwrite the " + read.what + " " + input_path + " (as " +
                             output + "); choose another prefix");
  };
  // A numbered mosaic or shard file of this prefix: PREFIX-<digits>.<extension>.
  auto numbered = [&](const char* extension) {
    const std::string dir = prefix.find('/') == std::string::npos ? "." : prefix.substr(0, prefix.find_last_of('/'));
    char resolved_dir[PATH_MAX];
    char input_dir[PATH_MAX];
    const std::string input_parent = input_path.find('/') == std::string::npos
                                         ? "."
                                         : input_path.substr(0, input_path.find_last_of('/'));
    if (::realpath(dir.c_str(), resolved_dir) == nullptr || ::realpath(input_parent.c_str(), input_dir) == nullptr ||
        std::strcmp(resolved_dir, input_dir) != 0)
      return;
    const std::string name = input_path.substr(input_path.find_last_of('/') + 1);
    if (facegen::is_numbered_mosaic_name(name, prefix.substr(prefix.find_last_of('/') + 1), extension))
      refuse(dir + "/" + name);
  };
  for (facegen::OutputFormat format : formats) {
    const std::string extension = std::string(".") + facegen::format_extension(format);
    switch (format) {
      case facegen::OutputFormat::Text:
        if (same_file(prefix + extension, input)) refuse(prefix + extension);
        break;
      case facegen::OutputFormat::Tar:
        numbered(facegen::format_extension(format));
        break;
      case facegen::OutputFormat::Npy:
      case facegen::OutputFormat::NpyU8:
      case facegen::OutputFormat::Bmp:
      case facegen::OutputFormat::MosaicPng:
        if (same_file(prefix + extension, input)) refuse(prefix + extension);
        numbered(facegen::format_extension(format));
        break;
      case facegen::OutputFormat::Png: {
        // The folder is replaced as a whole at the end: an input inside it would go with it.
        char folder[PATH_MAX];
        char file[PATH_MAX];
        if (::realpath(prefix.c_str(), folder) != nullptr && ::realpath(input_path.c_str(), file) != nullptr &&
            std::strncmp(file, folder, std::strlen(folder)) == 0 && file[std::strlen(folder)] == '/')
          refuse(prefix + "/");
        break;
      }
    }
  }
}

// PATH with its folder resolved (as far up as folders exist), so that two spellings of one name,
// or a name inside a folder not made yet, compare equal.
std::string resolved_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = path.substr(slash == std::string::npos ? 0 : slash + 1);
  char resolved[PATH_MAX];
  if (::realpath(dir.c_str(), resolved) != nullptr) return std::string(resolved) + "/" + base;
  return dir == path || slash == std::string::npos ? path : resolved_name(dir) + "/" + base;
}

// --summary-json FILE may name neither a file the run reads nor one of its outputs (the summary,
// written last, would replace the output, or the output the summary).
void check_summary_path(const std::string& summary, const std::string& prefix,
                        const std::vector<facegen::OutputFormat>& formats, const std::vector<ReadFile>& read_files) {
  if (facegen::summary_to_stdout(summary)) return;
  struct stat existing;
  for (const ReadFile& read : read_files) {
    if (!read.path.empty() && ::stat(read.path.c_str(), &existing) == 0 && same_file(summary, existing)) {
      throw facegen::UserError("--summary-json " + summary + " would overwrite the " + read.what + " " + read.path +
                               "; choose another path");
    }
  }
  const std::string name = resolved_name(summary);
  const std::string stem = resolved_name(prefix);
  auto refuse = [&] {
    throw facegen::UserError("--summary-json " + summary + " is one of the outputs of --output " + prefix +
                             "; choose another path");
  };
  for (facegen::OutputFormat format : formats) {
    if (format == facegen::OutputFormat::Png) {
      if (name.compare(0, stem.size() + 1, stem + "/") == 0) refuse();
      continue;
    }
    const char* extension = facegen::format_extension(format);
    if (name == stem + "." + extension) refuse();
    const bool numbered = format == facegen::OutputFormat::Bmp || format == facegen::OutputFormat::MosaicPng ||
                          facegen::is_sharded_format(format);
    if (numbered && facegen::is_numbered_mosaic_name(name, stem, extension)) refuse();
  }
}

// The batch job the flags describe (one latent source and --output are there: checked before); every
// flag's value checked, each bad one a UserError or cxxopts exception of one sentence.
facegen::GenerateRequest request_from_flags(const cxxopts::ParseResult& args, bool parallel_job) {
  const bool synthetic = args["device"].as<std::string>() == "synthetic";
  facegen::GenerateRequest request;
  if (args.count("model")) {
    request.model_path = args["model"].as<std::string>();
  } else if (!synthetic) {
    request.model_path = default_model_path();
  }
  // "-": standard input, which the latent readers open as a file or read as the pipe it is.
  if (args.count("input")) request.latents.path = args["input"].as<std::string>() == "-" ? "/dev/stdin" : args["input"].as<std::string>();
  request.latents.seed = seed_flag(args);
  if (args.count("random")) request.latents.random_count = int_flag(args, "random", 1, facegen::kMaxImages);
  if (args.count("interpolate")) request.latents.interpolate_side = int_flag(args, "interpolate", 1, 1000);
  if (args.count("seeds")) request.latents.seeds = seeds_flag(args);
  request.latents.truncation = truncation_flag(args);
  request.output_prefix = args["output"].as<std::string>();
  request.formats = facegen::parse_formats(args["formats"].as<std::string>());
  facegen::refuse_unused_flags(args, request.formats, parallel_job);
  facegen::refuse_repeated_seed_names(request);
  const std::vector<ReadFile> read_files = {{"input file", request.latents.path}, {"model file", request.model_path}};
  request.sinks.png_layout = png_layout_flag(args, request.formats);
  check_output_prefix(request.output_prefix, read_files, request.formats, request.sinks.png_layout,
                      request.latents.seeds != nullptr);
  request.backend.device = parse_device(args["device"].as<std::string>());
  request.backend.cuda_device = static_cast<int>(int_flag(args, "gpu", 0, 1 << 20));
  request.backend.precision = facegen::parse_precision(args["precision"].as<std::string>());
  request.backend.max_batch = static_cast<int>(int_flag(args, "batch", 1, 1 << 20));
  request.backend.threads = static_cast<int>(int_flag(args, "threads", 0, 4096));
  request.sinks.mosaic_tiles = static_cast<int>(int_flag(args, "mosaic-tiles", 1, facegen::kMaxMosaicTiles));
  request.sinks.threads = static_cast<int>(int_flag(args, "write-threads", 0, 4096));
  grid_flags(args, request.formats, &request.sinks);
  shard_flag(args, request.formats, &request.sinks);
  png_level_flag(args, request.formats, &request.sinks);
  if (args.count("resume")) {
    facegen::require_resumable_outputs(request.formats, request.sinks.shard_images);
    request.resume = true;
    request.sinks.png_group_images = facegen::kResumePngGroupImages;
  }
  // Taken as given: a chunk smaller than --batch makes GPU batches of the chunk's size.
  request.chunk_images = args.count("chunk") ? int_flag(args, "chunk", 1, 1 << 20) : 0;
  if (args.count("summary-json")) {
    request.summary_json_path = args["summary-json"].as<std::string>();
    check_summary_path(request.summary_json_path, request.output_prefix, request.formats, read_files);
  }
  const bool quiet = args.count("quiet") > 0;
  request.progress.style = facegen::progress_style_for(STDERR_FILENO, quiet);
  request.progress.every_seconds = seconds_flag(args, "progress-every");

  request.on_notice = [quiet](const std::string& notice) {
    if (!quiet) say("facegen: " + notice);
  };
  return request;
}

int run_command_line(int argc, char** argv, const facegen::mpi::Launch& launch, bool* rank_job_ran) {
  cxxopts::Options options = command_line();

  // Under mpirun or srun every rank parses the same command line: let one of them complain.
  if (!facegen::mpi::prints_shared_messages(launch)) {
    std::cerr.setstate(std::ios::failbit);
  }
  // Once the run's request is read: where a failure's JSON goes (--summary-json), and what it names.
  facegen::RunFailure failure;
  std::string failure_json_path;
  try {
    auto args = options.parse(argc, argv);
    facegen::refuse_repeated_flags(args);
    if (args.count("help")) {
      std::cout << options.help(kHelpGroups)
                << "\nExit status: 0 success, 1 bad input, 2 bad command line, 3 internal or device fault; "
                   "4 (--finish-commit) the old outputs are back.\n"
                   "\nfacegen serve [options]: the same generator as an HTTP service (see facegen serve --help).\n";
      return 0;
    }
    if (args.count("version")) {
      std::cout << facegen::version_text();
      return 0;
    }
    if (!args.unmatched().empty()) {
      say("facegen: unexpected argument '" + args.unmatched().front() + "' (see --help)");
      return kExitUsage;
    }
    if (args.count("finish-commit")) {
      facegen::refuse_flags_beside_finish_commit(args);
      return finish_commit_command(args["finish-commit"].as<std::string>());
    }
    const int sources = static_cast<int>(args.count("input") + args.count("random") + args.count("interpolate") +
                                         args.count("seeds"));
    if (sources != 1) {
      say("facegen: give exactly one of --input PATH, --random N, --interpolate K, --seeds LIST (see --help)");
      return kExitUsage;
    }
    if (!args.count("output")) {
      say("facegen: missing --output PREFIX (see --help)");
      return kExitUsage;
    }
    const bool parallel_job = launch.kind == facegen::mpi::LaunchKind::Rank || args.count("mpi");
    facegen::GenerateRequest request = request_from_flags(args, parallel_job);
    const bool quiet = args.count("quiet") > 0;
    if (facegen::mpi::prints_shared_messages(launch)) {
      failure_json_path = request.summary_json_path;
      failure = {kExitInput, "", request.output_prefix, request.formats, request.resume, false};
    }
    if (launch.kind == facegen::mpi::LaunchKind::Unusable) {
      say("facegen: " + launch.problem);
      return kExitUsage;
    }
    if (parallel_job) {
      if (args.count("gpu")) {
        throw facegen::UserError("--gpu picks the GPU of a single-process run; the ranks of a parallel job pick theirs "
                                 "by node-local rank (limit them with CUDA_VISIBLE_DEVICES)");
      }
      facegen::mpi::RankJobOptions rank_options;
      rank_options.verbose = args.count("verbose") > 0;
      rank_options.quiet = quiet;
      rank_options.all_ranks = args.count("all-ranks") > 0;
      rank_options.min_images_per_rank = int_flag(args, "min-images-per-rank", 0, INT64_MAX / 2);
      const int64_t per_round = int_flag(args, "images-per-round", 0, int64_t{1} << 20);
      if (per_round > 0) request.chunk_images = per_round;  // else --chunk, as given
      facegen::use_launcher_terminal(request.progress, quiet);
      std::cerr.clear();  // from here on each rank reports its own errors, naming itself
      *rank_job_ran = true;
      failure_json_path.clear();  // rank 0 of the job writes it
      return facegen::mpi::run_as_rank(request, rank_options);
    }

    // One process, one GPU: CUDA starts on that GPU alone.
    const facegen::DeviceKind device = request.backend.device;
    if ((device == facegen::DeviceKind::Cuda || device == facegen::DeviceKind::Auto) &&
        facegen::see_only_gpu(std::max(0, request.backend.cuda_device))) {
      request.backend.cuda_device = 0;
    }
    const facegen::RunSummary summary = facegen::run_generation(request);
    failure.outputs_in_place = true;
    facegen::report_summary(summary, request.summary_json_path, quiet);
    return 0;
  } catch (const cxxopts::exceptions::exception& e) {
    say("facegen: " + facegen::command_line_problem(e) + " (see --help)");
    return kExitUsage;
  } catch (...) {
    const facegen::Failure problem = facegen::describe_current_exception();
    say((problem.exit_code == kExitInput ? "facegen: error: " : "facegen: fault: ") + problem.message);
    failure.exit_code = problem.exit_code;
    failure.message = problem.message;
    facegen::report_failure_json(failure, failure_json_path);
    return problem.exit_code;
  }
}

// What the program printed to stdout (the summary, --help) is part of its result: a stdout that
// could not take it (a full disk, a closed descriptor) fails the run with status 1, like an output
// file that could not be written; the output files themselves are already in place.
int main(int argc, char** argv) {
  occupy_standard_descriptors();
  share_malloc_arena_under_address_limit();
  // A rank stops when the launcher that started it dies (mpi/launcher_watch.hpp).
  const facegen::mpi::Launch launch = facegen::mpi::detect_launch();
  if (launch.kind == facegen::mpi::LaunchKind::Rank) facegen::mpi::watch_launcher(launch.rank_hint);
  // `facegen serve ...`: the HTTP service, with signal handling of its own (serve/serve_main.cpp).
  if (argc > 1 && std::strcmp(argv[1], "serve") == 0) {
    if (!stack_room_or_say(launch)) return kExitInput;
    const int status = facegen::serve::serve_main(argc - 1, argv + 1, default_model_path());
    std::cout.flush();
    return status;
  }
  // A rank of a parallel job is silent when stopped from the start: the launcher stops the others
  // when one fails, even before they reach MPI, and the failing rank has said why.
  facegen::install_stop_handlers(launch.kind == facegen::mpi::LaunchKind::Rank ? facegen::StopStyle::DieOfSignal
                                                                               : facegen::StopStyle::Message);
  bool rank_job_ran = false;
  int status = stack_room_or_say(launch) ? run_command_line(argc, argv, launch, &rank_job_ran) : kExitInput;
  if (launch.kind == facegen::mpi::LaunchKind::Rank && !rank_job_ran && status != 0) {
    status = facegen::mpi::end_rank_before_job(status);
  }
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
