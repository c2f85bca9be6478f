// summary.cpp: the run summary for a person and as JSON (see summary.hpp).
#include "run/summary.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/build_info.hpp"
#include "common/text_format.hpp"
#include "common/version.hpp"
#include "commit/atomic_file.hpp"
#include "commit/existing_outputs.hpp"
#include "commit/output_guard.hpp"

namespace facegen {

std::string timing_text(double seconds, int64_t images, double bytes) {
  char text[128];
  int n = std::snprintf(text, sizeof text, "%.3f s", seconds);
  if (seconds > 0) {
    n += std::snprintf(text + n, sizeof text - n, " (%.0f images/s", static_cast<double>(images) / seconds);
    if (bytes > 0) n += std::snprintf(text + n, sizeof text - n, ", %.1f MB/s", bytes / 1e6 / seconds);
    std::snprintf(text + n, sizeof text - n, ")");
  }
  return text;
}

// A path as a reader wants it: no "//", "/./" or "dir/.." (lexically: outputs are not symlinks we
// follow, and a path that does not exist yet still reads well).
std::string normal_path(const std::string& path) {
  if (path.empty()) return path;
  const bool absolute = path[0] == '/';
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    if (part == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
      } else if (!absolute) {
        parts.push_back(part);
      }
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    start = end + 1;
  }
  std::string out = absolute ? "/" : "";
  for (size_t k = 0; k < parts.size(); ++k) out += (k ? "/" : "") + parts[k];
  return out.empty() ? "." : out;
}

void print_summary(std::FILE* out, const RunSummary& s) {
  std::fprintf(out, "model     %s\n", s.model.empty() ? "(none)" : normal_path(s.model).c_str());
  std::fprintf(out, "input     %s: %lld images\n", s.latents.c_str(), static_cast<long long>(s.images));
  if (s.ranks > 1 || !s.per_rank.empty()) {
    std::fprintf(out, "ranks     %d on %d host%s; %s\n", s.ranks, s.hosts, s.hosts == 1 ? "" : "s", s.ranks_note.c_str());
  }
  std::fprintf(out, "backend   %s\n", s.backend.c_str());
  for (const StageTiming& stage : s.stages) {
    std::fprintf(out, "%-9s %s%s%s\n", stage.name.c_str(), timing_text(stage.seconds, s.images, stage.bytes).c_str(),
                 stage.note.empty() ? "" : ", ", stage.note.c_str());
  }
  std::string startup;
  for (const StageTiming& part : s.startup) {
    char text[96];
    std::snprintf(text, sizeof text, "%s%s %.3f s", startup.empty() ? " (" : ", ", part.name.c_str(), part.seconds);
    startup += text;
  }
  if (!startup.empty()) startup += ")";
  std::fprintf(out, "total     %s from start to finished files, model load %.3f s%s, peak memory %s\n",
               timing_text(s.total_seconds, s.images, 0).c_str(), s.load_seconds, startup.c_str(),
               human_bytes(static_cast<double>(s.peak_memory_bytes)).c_str());
  if (s.total_seconds > 0) {
    std::fprintf(out, "cpu       %.3f s, %.1f cores busy on average; %lld pool threads\n", s.cpu_seconds,
                 s.cpu_seconds / s.total_seconds, static_cast<long long>(s.threads_started));
  }
  for (const FileWritten& file : s.files) {
    std::fprintf(out, "wrote     %s (%s)\n", normal_path(file.path).c_str(), human_bytes(static_cast<double>(file.bytes)).c_str());
  }
  if (!s.stale.empty()) {
    // Named, never removed: only what a run replaces goes.
    const size_t shown = std::min<size_t>(s.stale.size(), 3);
    std::string names;
    for (size_t k = 0; k < shown; ++k) names += (k ? ", " : "") + normal_path(s.stale[k]);
    if (s.stale.size() > shown) names += " and " + with_commas(static_cast<int64_t>(s.stale.size() - shown)) + " more";
    std::fprintf(out, "left      %s: outputs of an earlier run with this prefix that this run did not replace\n",
                 names.c_str());
  }
  std::fflush(out);
}

namespace {

nlohmann::ordered_json rate(double seconds, double amount) {
  return seconds > 0 ? nlohmann::ordered_json(amount / seconds) : nlohmann::ordered_json(nullptr);
}

}  // namespace

std::string summary_json(const RunSummary& s) {
  using json = nlohmann::ordered_json;  // keys in the order written here
  json stages = json::object();
  for (const StageTiming& stage : s.stages) {
    json entry = {{"seconds", stage.seconds}, {"images_per_second", rate(stage.seconds, static_cast<double>(s.images))}};
    if (stage.bytes > 0) {
      entry["bytes"] = static_cast<int64_t>(stage.bytes);
      entry["megabytes_per_second"] = rate(stage.seconds, stage.bytes / 1e6);
    }
    if (!stage.note.empty()) entry["note"] = stage.note;
    stages[stage.name] = entry;
  }
  json files = json::array();
  for (const FileWritten& file : s.files) files.push_back({{"path", normal_path(file.path)}, {"bytes", file.bytes}});
  json stale = json::array();
  for (const std::string& path : s.stale) stale.push_back(normal_path(path));
  json out = {
      {"program", {{"version", FACEGEN_VERSION}, {"commit", git_commit()}}},
      {"model", s.model.empty() ? json(nullptr) : json(normal_path(s.model))},
      {"latents", s.latents},
      {"seeds", json::array()},
      {"images", s.images},
      {"device", s.device},
      {"precision", s.precision},
      {"backend", s.backend},
      {"ranks", s.ranks},
      {"hosts", s.hosts},
      {"generating_ranks", s.generating_ranks},
      {"load_seconds", s.load_seconds},
      {"startup", json::object()},
      {"stages", stages},
      {"total", {{"seconds", s.total_seconds}, {"images_per_second", rate(s.total_seconds, static_cast<double>(s.images))}}},
      {"peak_memory_bytes", s.peak_memory_bytes},
      {"cpu_seconds", s.cpu_seconds},
      {"threads_started", s.threads_started},
      {"files", files},
      {"stale_files", stale},
  };
  for (const StageTiming& part : s.startup) out["startup"][part.name + "_seconds"] = part.seconds;
  if (s.startup.empty()) out.erase("startup");
  // --seeds only, in the order given: image k's seed is the k-th of these ranges written out.
  if (s.seeds) {
    for (const SeedRange& range : s.seeds->ranges()) out["seeds"].push_back({range.first, range.last});
  } else {
    out.erase("seeds");
  }
  if (!s.per_rank.empty()) {
    json ranks = json::array();
    for (const RankFigures& r : s.per_rank) {
      ranks.push_back({{"rank", r.rank},
                       {"host", r.host},
                       {"backend", r.backend},
                       {"images", r.images},
                       {"startup_seconds", r.startup_seconds},
                       {"parse_seconds", r.parse_seconds},
                       {"generate_seconds", r.compute_seconds},
                       {"format_seconds", r.format_seconds},
                       {"write_seconds", r.write_seconds},
                       {"total_seconds", r.total_seconds},
                       {"generate_images_per_second", rate(r.compute_seconds, static_cast<double>(r.images))},
                       {"peak_memory_bytes", r.peak_memory_bytes}});
    }
    out["per_rank"] = ranks;
  }
  return out.dump(2) + "\n";
}

void write_summary_json(const std::string& path, const RunSummary& summary) {
  const std::string text = summary_json(summary);
  require_replaceable(path, WrittenKind::SummaryJson, "--summary-json");  // checked at the start; again, as it may have changed
  AtomicFile file(path);
  file.write(text.data(), text.size());
  file.commit();
}

void report_summary(const RunSummary& summary, const std::string& json_path, bool quiet) {
  if (summary_to_stdout(json_path)) {
    const std::string text = summary_json(summary);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return;
  }
  if (!json_path.empty()) write_summary_json(json_path, summary);
  if (!quiet) print_summary(stdout, summary);
}

int64_t file_bytes(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  if (!S_ISDIR(st.st_mode)) return static_cast<int64_t>(st.st_size);
  int64_t total = 0;
  if (DIR* dir = ::opendir(path.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") total += file_bytes(path + "/" + name);
    }
    ::closedir(dir);
  }
  return total;
}

}  // namespace facegen
