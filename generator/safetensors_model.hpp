// safetensors_model.hpp: a generator in a safetensors file, with PyTorch's own names and layouts.
//
// safetensors (Hugging Face): an 8-byte little-endian header length H, a JSON header of H bytes, then
// the data. The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end)}
// (offsets into the data), and "__metadata__" to a map of strings. Tensors cover the data exactly,
// without overlap or gap. A generator file holds the state_dict of the PyTorch DCGAN tutorial's
// generator, nn.Sequential `main` (i = 0..S-1 for the S batch norms, S = 3, 4 or 5 for images of
// 32, 64 or 128 pixels):
//   main.0.weight            (nz, C0, 4, 4)       ConvTranspose2d(nz, C0, 4, 1, 0): the projection
//   main.{3i+1}.weight, .bias, .running_mean, .running_var   (C_i) each   BatchNorm2d(C_i)
//   main.{3i+1}.num_batches_tracked   () int64, optional, not used
//   main.{3i+3}.weight       (C_i, C_{i+1}, k, k) ConvTranspose2d(C_i, C_{i+1}, k, 2, 1)
//   main.0.bias, main.{3i+3}.bias   (C0), (C_{i+1})   only with biases; shpc's main.0.bias is (C0, 4, 4)
// with C_i = g * 2^(S-1-i) (64x64: 8g, 4g, 2g, g) and C_S = nc, float32 ("F32") little-endian.
// __metadata__ says what it is:
//   architecture "dcgan" (k = 4: the tutorial's generator) or "shpc" (k = 5: the SHPC network, whose
//   ConvTranspose2d(k=5, stride 2, padding 1) outputs 2h + 1 rows and columns, cropped to the first 2h,
//   and whose projection has a bias per output value, (8g, 4, 4), like the nn.Linear it was trained as),
//   nz, ngf, nc, kernel_size (4 or 5, as the architecture says), bias ("true" or "false"), and
//   image_size ("32", "64" or "128"; a file without it holds a 64x64 generator, as every file did
//   before the other sizes).
// Every problem is a UserError of one sentence naming the file and the key or tensor, what was
// expected and what was found.
#pragma once

#include <string>

#include "generator/network.hpp"

namespace facegen {

// Whether a file's first bytes (at least 9 of them) look like a safetensors file: a header length
// below 100 MB followed by '{'.
bool looks_like_safetensors(const std::string& first_bytes);

// The spec in a safetensors file's header (the tensors are checked against it when it is loaded).
ModelSpec read_safetensors_spec(const InputFile& file);

// Reads and validates the whole file, converting the tensors to the internal layout (network.hpp).
Network load_safetensors_network(const InputFile& file);

// The same from the file's bytes, `source` naming it in messages (for tests and the fuzz target).
Network parse_safetensors_network(const std::string& bytes, const std::string& source);

// The bytes of a safetensors file of `net` (no num_batches_tracked), for tests, the fuzz target and
// make-random-network; users export their models with tools/export_model.py.
std::string safetensors_bytes(const Network& net);

}  // namespace facegen
