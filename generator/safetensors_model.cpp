// safetensors_model.cpp: the safetensors container (header, offsets, coverage), the generator's
// tensors in it (names, shapes, metadata), and their conversion to and from the internal layout.
//
// Layouts, PyTorch's -> internal (network.hpp), C0 = g * 2^(S-1) (8g at 64x64):
//   main.0.weight (nz, C0, 4, 4) [c][o][y][x]     -> proj weight (nz, 16 C0) [c][(y * 4 + x) C0 + o]
//   main.0.bias, dcgan (C0) [o]                   -> proj bias (16 C0), the same for each of the 16 pixels
//   main.0.bias, shpc (C0, 4, 4) [o][y][x]        -> proj bias (16 C0) [(y * 4 + x) C0 + o]
//   main.{3i+3}.weight (c_in, c_out, k, k) [c][o][kh][kw] -> tconv weight (k, k, c_out, c_in) [kh][kw][o][c]
// PyTorch's ConvTranspose2d(stride 2, padding 1) sends input pixel i to output row 2i - 1 + kh, as
// the internal formula does, so the taps need no flip.
#include "generator/safetensors_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "common/errors.hpp"
#include "common/text_format.hpp"

namespace facegen {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100000000;  // the safetensors library's own limit
constexpr int64_t kMaxFileBytes = int64_t{4} << 30;  // far above the largest generator facegen runs

struct TensorEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // in the data section
};

struct Container {
  std::map<std::string, std::string> metadata;
  bool has_metadata = false;
  std::map<std::string, TensorEntry> tensors;
  const char* data = nullptr;
  uint64_t data_bytes = 0;
};

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw UserError("model file " + source + ": " + what);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + ")";
}

// A JSON value for a message: compact, at most 60 characters.
std::string shown(const json& value) {
  std::string text = value.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

int64_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, int64_t> kBytes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2},
      {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},     {"I64", 8}, {"U64", 8}, {"F64", 8}};
  const auto it = kBytes.find(dtype);
  return it == kBytes.end() ? 0 : it->second;
}

TensorEntry parse_entry(const std::string& key, const json& value, const std::string& source) {
  const std::string tensor = "tensor '" + key + "'";
  if (!value.is_object()) fail(source, tensor + " must be an object with dtype, shape and data_offsets, but it is " + shown(value));
  const auto dtype = value.find("dtype");
  const auto shape = value.find("shape");
  const auto offsets = value.find("data_offsets");
  if (dtype == value.end() || shape == value.end() || offsets == value.end()) {
    fail(source, tensor + " must have dtype, shape and data_offsets, but it is " + shown(value));
  }
  TensorEntry entry;
  if (!dtype->is_string() || dtype_bytes(dtype->get<std::string>()) == 0) {
    fail(source, tensor + " has dtype " + shown(*dtype) + ", which is not a safetensors dtype (F32, F16, I64, ...)");
  }
  entry.dtype = dtype->get<std::string>();
  if (!shape->is_array()) fail(source, tensor + " has shape " + shown(*shape) + ", but a shape is a list of sizes");
  // The element count saturates at 2^41: such a tensor needs more bytes than any file gives it.
  constexpr uint64_t kHuge = uint64_t{1} << 41;
  uint64_t elements = 1;
  bool empty = false;
  for (const json& size : *shape) {
    if (!size.is_number_unsigned() || size.get<uint64_t>() > (uint64_t{1} << 40)) {
      fail(source, tensor + " has shape " + shown(*shape) + ", but sizes are whole numbers from 0 to 2^40");
    }
    const uint64_t d = size.get<uint64_t>();
    entry.shape.push_back(static_cast<int64_t>(d));
    empty |= d == 0;
    elements = d != 0 && elements > kHuge / d ? kHuge : elements * d;
  }
  if (empty) elements = 0;
  if (!offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned()) {
    fail(source, tensor + " has data_offsets " + shown(*offsets) + ", but they are two whole numbers [begin, end]");
  }
  entry.begin = (*offsets)[0].get<uint64_t>();
  entry.end = (*offsets)[1].get<uint64_t>();
  if (entry.begin > entry.end) fail(source, tensor + " has data_offsets " + shown(*offsets) + ", which end before they begin");
  const uint64_t needed = elements * static_cast<uint64_t>(dtype_bytes(entry.dtype));
  if (entry.end - entry.begin != needed) {
    fail(source, tensor + " of shape " + shape_text(entry.shape) + " and dtype " + entry.dtype + " needs " +
                     with_commas(static_cast<int64_t>(needed)) + " bytes, but its data_offsets " + shown(*offsets) +
                     " give " + with_commas(static_cast<int64_t>(entry.end - entry.begin)));
  }
  return entry;
}

// The header of `bytes` (a whole file, or its first 8 + H bytes when header_only), checked. With
// the data: every tensor inside it, and the tensors covering it exactly, without overlap or gap.
Container parse_container(const std::string& bytes, const std::string& source, bool header_only) {
  if (bytes.size() < 8) {
    fail(source, "it has " + std::to_string(bytes.size()) +
                     " bytes, too few for a safetensors file (an 8-byte header length, then the header)");
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  if (header_bytes > kMaxHeaderBytes) {
    fail(source, "its header length is " + with_commas(static_cast<int64_t>(std::min<uint64_t>(header_bytes, INT64_MAX))) +
                     " bytes, more than the 100,000,000 a safetensors header may have");
  }
  if (header_bytes > bytes.size() - 8) {
    fail(source, "its header length is " + with_commas(static_cast<int64_t>(header_bytes)) + " bytes, but only " +
                     with_commas(static_cast<int64_t>(bytes.size() - 8)) + " bytes follow it (a truncated file?)");
  }
  json header;
  try {
    header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(header_bytes));
  } catch (const json::exception& e) {
    fail(source, std::string("its header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) fail(source, "its header is " + shown(header) + ", but it must be a JSON object of tensors");
  Container c;
  c.data = bytes.data() + 8 + header_bytes;
  c.data_bytes = header_only ? 0 : bytes.size() - 8 - header_bytes;
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") {
      if (!item.value().is_object()) fail(source, "its __metadata__ is " + shown(item.value()) + ", but it must be an object of strings");
      for (const auto& field : item.value().items()) {
        if (!field.value().is_string()) {
          fail(source, "__metadata__ " + field.key() + " is " + shown(field.value()) + ", but metadata values are strings");
        }
        c.metadata[field.key()] = field.value().get<std::string>();
      }
      c.has_metadata = true;
      continue;
    }
    c.tensors[item.key()] = parse_entry(item.key(), item.value(), source);
  }
  if (header_only) return c;
  std::vector<std::pair<const std::string*, const TensorEntry*>> by_offset;
  for (const auto& [key, entry] : c.tensors) by_offset.push_back({&key, &entry});
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.second->begin, a.second->end) < std::make_pair(b.second->begin, b.second->end);
  });
  uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const auto& [key, entry] : by_offset) {
    auto range = [](const TensorEntry* e) {
      return "[" + std::to_string(e->begin) + ", " + std::to_string(e->end) + ")";
    };
    if (entry->end > c.data_bytes) {
      fail(source, "tensor '" + *key + "' has data_offsets " + range(entry) + ", beyond the " +
                       with_commas(static_cast<int64_t>(c.data_bytes)) + " bytes of data (a truncated file?)");
    }
    if (entry->begin < covered) {
      fail(source, "tensors '" + *previous + "' and '" + *key + "' overlap: '" + *key + "' has data_offsets " +
                       range(entry) + ", but '" + *previous + "' ends at byte " + std::to_string(covered));
    }
    if (entry->begin > covered) {
      fail(source, "bytes [" + std::to_string(covered) + ", " + std::to_string(entry->begin) +
                       ") of the data belong to no tensor");
    }
    covered = entry->end;
    previous = key;
  }
  if (covered != c.data_bytes) {
    fail(source, "the data has " + with_commas(static_cast<int64_t>(c.data_bytes)) + " bytes, but the tensors end at byte " +
                     with_commas(static_cast<int64_t>(covered)));
  }
  return c;
}

// A positive whole number of at most 9 digits from a metadata string.
int metadata_int(const Container& c, const char* key, const std::string& source) {
  const auto it = c.metadata.find(key);
  if (it == c.metadata.end()) fail(source, std::string("its __metadata__ has no ") + key);
  const std::string& text = it->second;
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos) {
    fail(source, std::string("__metadata__ ") + key + " is \"" + text.substr(0, 40) + "\", but it must be a whole number");
  }
  return std::stoi(text);
}

ModelSpec spec_from_metadata(const Container& c, const std::string& source) {
  if (!c.has_metadata || c.metadata.find("architecture") == c.metadata.end()) {
    fail(source, "its header has no __metadata__ architecture saying which generator it holds (with nz, ngf, nc, "
                 "kernel_size, bias): write it with tools/export_model.py");
  }
  const std::string& architecture = c.metadata.at("architecture");
  if (architecture != "dcgan" && architecture != "shpc") {
    fail(source, "__metadata__ architecture is \"" + architecture.substr(0, 40) + "\", but it must be \"dcgan\" or \"shpc\"");
  }
  ModelSpec spec;
  spec.latent_dim = metadata_int(c, "nz", source);
  spec.base_channels = metadata_int(c, "ngf", source);
  spec.image_channels = metadata_int(c, "nc", source);
  spec.kernel_size = metadata_int(c, "kernel_size", source);
  const int expected_k = architecture == "dcgan" ? 4 : 5;
  if (spec.kernel_size != expected_k) {
    fail(source, "__metadata__ kernel_size is " + std::to_string(spec.kernel_size) + ", but architecture " + architecture +
                     " has " + std::to_string(expected_k) + "x" + std::to_string(expected_k) + " kernels");
  }
  const auto bias = c.metadata.find("bias");
  if (bias == c.metadata.end() || (bias->second != "true" && bias->second != "false")) {
    fail(source, "__metadata__ bias is " + (bias == c.metadata.end() ? std::string("missing") : "\"" + bias->second.substr(0, 40) + "\"") +
                     ", but it must be \"true\" or \"false\"");
  }
  spec.has_bias = bias->second == "true";
  if (c.metadata.count("image_size")) spec.image_size = metadata_int(c, "image_size", source);
  const std::string problem = model_spec_problem(spec);
  if (!problem.empty()) fail(source, "__metadata__ " + problem);
  return spec;
}

// One tensor of the generator: its name, shape, and where it goes in the internal layout.
enum class Place { ProjWeight, ProjBias, ProjBiasPixels, Copy, TConvWeight };
struct Slot {
  std::string key;
  std::vector<int64_t> shape;
  Place place;
  int64_t offset;  // in the internal floats: the block's start
};

std::vector<Slot> generator_slots(const Network& net) {
  const ModelSpec& spec = net.spec();
  const int64_t k = spec.kernel_size;
  std::vector<Slot> slots;
  const int64_t c0 = spec.stage_channels(0);
  slots.push_back({"main.0.weight", {spec.latent_dim, c0, 4, 4}, Place::ProjWeight, net.proj_weight_offset()});
  if (spec.has_bias && k == 4) slots.push_back({"main.0.bias", {c0}, Place::ProjBias, net.proj_bias_offset()});
  if (spec.has_bias && k == 5) {
    slots.push_back({"main.0.bias", {c0, 4, 4}, Place::ProjBiasPixels, net.proj_bias_offset()});
  }
  for (int i = 0; i < spec.stages(); ++i) {
    const int64_t c_in = spec.stage_channels(i), c_out = spec.stage_channels(i + 1);
    const std::string bn = "main." + std::to_string(3 * i + 1) + ".";
    const int64_t at = net.batchnorm_offset(i);  // beta, gamma, mean, var
    slots.push_back({bn + "weight", {c_in}, Place::Copy, at + c_in});
    slots.push_back({bn + "bias", {c_in}, Place::Copy, at});
    slots.push_back({bn + "running_mean", {c_in}, Place::Copy, at + 2 * c_in});
    slots.push_back({bn + "running_var", {c_in}, Place::Copy, at + 3 * c_in});
    const std::string conv = "main." + std::to_string(3 * i + 3) + ".";
    slots.push_back({conv + "weight", {c_in, c_out, k, k}, Place::TConvWeight, net.tconv_weight_offset(i)});
    if (spec.has_bias) slots.push_back({conv + "bias", {c_out}, Place::Copy, net.tconv_bias_offset(i)});
  }
  return slots;
}

bool is_batches_tracked(const ModelSpec& spec, const std::string& key) {
  for (int i = 0; i < spec.stages(); ++i)
    if (key == "main." + std::to_string(3 * i + 1) + ".num_batches_tracked") return true;
  return false;
}

// "element [1, 2, 0, 3]" of a tensor of `shape`, for flat index `index`.
std::string element_text(const std::vector<int64_t>& shape, int64_t index) {
  std::vector<int64_t> at(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    at[d] = index % shape[d];
    index /= shape[d];
  }
  std::string out = "element [";
  for (size_t d = 0; d < at.size(); ++d) out += (d ? ", " : "") + std::to_string(at[d]);
  return out + "]";
}

// Calls at(torch, internal) once for each value of the slot's tensor: its index in PyTorch's layout
// (the file's) and in the internal floats from slot.offset. Place::ProjBias visits pixel 0 only.
template <typename At>
void for_each_value(const Slot& slot, const ModelSpec& spec, At at) {
  switch (slot.place) {
    case Place::Copy:
    case Place::ProjBias: {
      int64_t count = 1;
      for (int64_t d : slot.shape) count *= d;
      for (int64_t i = 0; i < count; ++i) at(i, i);
      return;
    }
    case Place::ProjBiasPixels:  // (c0, 16) in the file, (16, c0) inside
      for (int64_t o = 0; o < slot.shape[0]; ++o)
        for (int64_t p = 0; p < 16; ++p) at(o * 16 + p, p * slot.shape[0] + o);
      return;
    case Place::ProjWeight: {  // (nz, c0 * 16) in the file, (nz * 16, c0) inside
      const int64_t c0 = slot.shape[1];
      for (int64_t c = 0; c < spec.latent_dim; ++c)
        for (int64_t o = 0; o < c0; ++o)
          for (int64_t p = 0; p < 16; ++p) at((c * c0 + o) * 16 + p, (c * 16 + p) * c0 + o);
      return;
    }
    case Place::TConvWeight: {  // (c_in, c_out, kh, kw) in the file, (taps, c_out, c_in) inside
      const int64_t c_in = slot.shape[0], c_out = slot.shape[1], taps = slot.shape[2] * slot.shape[3];
      for (int64_t c = 0; c < c_in; ++c)
        for (int64_t o = 0; o < c_out; ++o)
          for (int64_t t = 0; t < taps; ++t) at((c * c_out + o) * taps + t, (t * c_out + o) * c_in + c);
      return;
    }
  }
}

// Copies one tensor's values (PyTorch's layout) into the internal floats, after checking them.
void place_tensor(const Slot& slot, const float* v, std::vector<float>& f, const ModelSpec& spec,
                  const std::string& source) {
  int64_t count = 1;
  for (int64_t d : slot.shape) count *= d;
  const bool variance = slot.key.size() > 12 && slot.key.compare(slot.key.size() - 12, 12, ".running_var") == 0;
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(v[i])) {
      fail(source, "tensor '" + slot.key + "' " + element_text(slot.shape, i) + " is " +
                       (std::isnan(v[i]) ? "NaN" : v[i] > 0 ? "+Inf" : "-Inf"));
    }
    if (variance && !(v[i] + kBatchNormEps > 0.0f)) {
      char value[64];
      std::snprintf(value, sizeof value, "%.9g", static_cast<double>(v[i]));
      fail(source, "tensor '" + slot.key + "' " + element_text(slot.shape, i) + " is " + value +
                       ", but a batch-norm variance plus 1e-5 must be positive");
    }
  }
  float* dst = f.data() + slot.offset;
  for_each_value(slot, spec, [&](int64_t torch, int64_t internal) { dst[internal] = v[torch]; });
  if (slot.place == Place::ProjBias) {  // pixel 0's bias, the same for all 16 pixels
    for (int64_t p = 1; p < 16; ++p) std::copy(dst, dst + count, dst + p * count);
  }
}

// The reverse of place_tensor: one tensor's values in PyTorch's layout from the internal floats.
std::vector<float> take_tensor(const Slot& slot, const std::vector<float>& f, const ModelSpec& spec) {
  int64_t count = 1;
  for (int64_t d : slot.shape) count *= d;
  std::vector<float> v(static_cast<size_t>(count));
  const float* src = f.data() + slot.offset;
  for_each_value(slot, spec, [&](int64_t torch, int64_t internal) { v[torch] = src[internal]; });
  return v;
}

// The file's first `limit` bytes (all of them, if fewer), through its one descriptor.
std::string read_whole(const InputFile& file, int64_t limit) {
  std::string bytes;
  if (file.regular()) {
    if (file.bytes() > kMaxFileBytes) {
      fail(file.path(), "it has " + with_commas(file.bytes()) + " bytes, more than any generator facegen runs");
    }
    bytes.resize(static_cast<size_t>(std::min(file.bytes(), limit)));
    file.read_at(0, static_cast<int64_t>(bytes.size()), bytes.data());
    return bytes;
  }
  char buffer[1 << 16];
  while (static_cast<int64_t>(bytes.size()) < limit) {
    const int64_t n = file.read_some(static_cast<int64_t>(bytes.size()),
                                     std::min<int64_t>(sizeof buffer, limit - static_cast<int64_t>(bytes.size())), buffer);
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  return bytes;
}

}  // namespace

bool looks_like_safetensors(const std::string& first_bytes) {
  if (first_bytes.size() < 9 || first_bytes[8] != '{') return false;
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | static_cast<unsigned char>(first_bytes[static_cast<size_t>(i)]);
  return header_bytes <= kMaxHeaderBytes;
}

ModelSpec read_safetensors_spec(const InputFile& file) {
  const std::string& path = file.path();
  std::string bytes = read_whole(file, 8);
  uint64_t header_bytes = 0;
  for (int i = static_cast<int>(bytes.size()) - 1; i >= 0; --i) {
    header_bytes = header_bytes << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  }
  if (bytes.size() == 8 && header_bytes <= kMaxHeaderBytes) bytes = read_whole(file, 8 + static_cast<int64_t>(header_bytes));
  return spec_from_metadata(parse_container(bytes, path, /*header_only=*/true), path);
}

Network load_safetensors_network(const InputFile& file) {
  return parse_safetensors_network(read_whole(file, kMaxFileBytes + 1), file.path());
}

std::string safetensors_bytes(const Network& net) {
  const ModelSpec& spec = net.spec();
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"},
                            {"architecture", spec.kernel_size == 4 ? "dcgan" : "shpc"},
                            {"nz", std::to_string(spec.latent_dim)},
                            {"ngf", std::to_string(spec.base_channels)},
                            {"nc", std::to_string(spec.image_channels)},
                            {"kernel_size", std::to_string(spec.kernel_size)},
                            {"bias", spec.has_bias ? "true" : "false"},
                            {"image_size", std::to_string(spec.image_size)}};
  std::string data;
  for (const Slot& slot : generator_slots(net)) {
    const std::vector<float> v = take_tensor(slot, net.floats(), spec);
    const uint64_t begin = data.size();
    data.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    header[slot.key] = {{"dtype", "F32"}, {"shape", slot.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xff);
  return out + text + data;
}

Network parse_safetensors_network(const std::string& bytes, const std::string& source) {
  const Container c = parse_container(bytes, source, /*header_only=*/false);
  const ModelSpec spec = spec_from_metadata(c, source);
  Network net(spec);
  const std::vector<Slot> slots = generator_slots(net);
  const std::string what = "the generator of " + describe_spec(spec);
  for (const Slot& slot : slots) {
    const auto it = c.tensors.find(slot.key);
    if (it == c.tensors.end()) fail(source, "it has no tensor '" + slot.key + "', " + shape_text(slot.shape) + " float32 in " + what);
    const TensorEntry& entry = it->second;
    if (entry.dtype != "F32") {
      fail(source, "tensor '" + slot.key + "' has dtype " + entry.dtype + ", but the generator's tensors are float32 (F32)");
    }
    if (entry.shape != slot.shape) {
      fail(source, "tensor '" + slot.key + "' has shape " + shape_text(entry.shape) + ", but " + what + " has " +
                       shape_text(slot.shape));
    }
  }
  for (const auto& [key, entry] : c.tensors) {
    if (is_batches_tracked(spec, key)) {
      if (entry.dtype != "I64" || !entry.shape.empty()) {
        fail(source, "tensor '" + key + "' is " + entry.dtype + " " + shape_text(entry.shape) +
                         ", but a batch norm's num_batches_tracked is an int64 scalar (I64, shape ())");
      }
      continue;
    }
    const std::string& name = key;  // a structured binding cannot be captured in C++17
    const bool known = std::any_of(slots.begin(), slots.end(), [&](const Slot& s) { return s.key == name; });
    if (!known) {
      const bool bias = key.size() > 5 && key.compare(key.size() - 5, 5, ".bias") == 0;
      fail(source, "it has a tensor '" + key + "' that " + what + " does not have" +
                       (bias && !spec.has_bias ? " (its __metadata__ bias is \"false\")" : ""));
    }
  }
  std::vector<float>& f = net.mutable_floats();
  std::vector<float> values;
  for (const Slot& slot : slots) {
    const TensorEntry& entry = c.tensors.at(slot.key);
    values.resize((entry.end - entry.begin) / sizeof(float));
    std::memcpy(values.data(), c.data + entry.begin, entry.end - entry.begin);  // the data need not be aligned
    place_tensor(slot, values.data(), f, spec, source);
  }
  validate_network(net, source);
  return net;
}

}  // namespace facegen
