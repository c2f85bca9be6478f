// checksum_parts.hpp: the CRC-32 and the Adler-32 of a PNG (formats/png_encoder.hpp) from parts that
// many threads checksum at once (kernels/encode_images.cu), on the host and the device alike, so that
// the host's unit tests hold the arithmetic to libdeflate's checksums of the whole.
//
// CRC-32 (PNG's and zlib's: polynomial 0x04c11db7 bit-reversed, register started at all ones and
// complemented at the end). The register without its start and end, raw(M), is linear over GF(2):
// raw(A B) = raw(A) * x^(8 |B|) + raw(B) mod P, and leading zero bytes leave it 0. So a message cut
// into T parts of S bytes each, counted from its end (the first part holding the zeros that pad the
// message at its front to T S bytes, which change nothing), is raw-checksummed part by part and the
// parts joined pairwise in log2(T) rounds, round k shifting by 2^k S bytes. The CRC of the message
// (L bytes) is then raw(M) + x^(8L) * 0xffffffff, complemented. Bits are reflected, as the register
// holds them: bit 31 is x^0.
// Adler-32 of bytes v_0 .. v_{L-1}: A = 1 + sum v_r, B = L + sum (L - r) v_r, both mod 65521; parts add.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define FACEGEN_HOST_DEVICE __host__ __device__
#else
#define FACEGEN_HOST_DEVICE
#endif

namespace facegen {
namespace checksum {

constexpr uint32_t kCrcPolynomial = 0xedb88320u;  // reflected
constexpr uint32_t kCrcOne = 0x80000000u;         // x^0
constexpr uint32_t kCrcByteShift = 0x00800000u;   // x^8: one byte
constexpr uint32_t kAdlerModulus = 65521;

// a b mod P.
FACEGEN_HOST_DEVICE inline uint32_t crc_multiply(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t term = kCrcOne; term != 0; term >>= 1) {
    if (a & term) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kCrcPolynomial : b >> 1;  // b x
  }
  return product;
}

// x^(8 bytes) mod P: what shifting a register past `bytes` zero bytes multiplies it by.
FACEGEN_HOST_DEVICE inline uint32_t crc_shift_factor(uint64_t bytes) {
  uint32_t factor = kCrcOne, square = kCrcByteShift;
  for (; bytes != 0; bytes >>= 1) {
    if (bytes & 1) factor = crc_multiply(factor, square);
    square = crc_multiply(square, square);
  }
  return factor;
}

// The raw register after `byte`, by the byte-at-a-time table: table[i] = raw(byte i).
FACEGEN_HOST_DEVICE inline uint32_t crc_table_entry(uint32_t i) {
  uint32_t crc = i;
  for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) ? (crc >> 1) ^ kCrcPolynomial : crc >> 1;
  return crc;
}
FACEGEN_HOST_DEVICE inline uint32_t crc_update(uint32_t crc, uint8_t byte, const uint32_t* table) {
  return table[(crc ^ byte) & 0xffu] ^ (crc >> 8);
}

// The constants of a message of `bytes` bytes cut into `parts` (a power of two, at most 1 << 12) parts
// counted from its end.
struct CrcParts {
  int64_t part_bytes = 0;     // S
  int rounds = 0;             // log2(parts)
  uint32_t round_factor[12];  // x^(8 2^k S)
  uint32_t start_factor = 0;  // x^(8 L), for the register's start of all ones
};
inline CrcParts crc_parts(int64_t bytes, int parts) {
  CrcParts c;
  while ((1 << c.rounds) < parts) ++c.rounds;
  c.part_bytes = (bytes + parts - 1) / parts;
  for (int k = 0; k < c.rounds; ++k) c.round_factor[k] = crc_shift_factor(static_cast<uint64_t>(c.part_bytes) << k);
  c.start_factor = crc_shift_factor(static_cast<uint64_t>(bytes));
  return c;
}
// Part t (0 .. parts - 1) of a message of `bytes` bytes: [begin, end), where begin may be negative
// (the padding zeros) and is to be clipped at 0.
FACEGEN_HOST_DEVICE inline int64_t crc_part_end(const CrcParts& c, int64_t bytes, int parts, int t) {
  return bytes - (static_cast<int64_t>(parts) - 1 - t) * c.part_bytes;
}
// Joins two neighbouring groups in round k: `left` came before `right` (2^k S bytes).
FACEGEN_HOST_DEVICE inline uint32_t crc_join(const CrcParts& c, int round, uint32_t left, uint32_t right) {
  return crc_multiply(left, c.round_factor[round]) ^ right;
}
// The CRC-32 of the message from the raw register of all of it.
FACEGEN_HOST_DEVICE inline uint32_t crc_finish(const CrcParts& c, uint32_t raw) {
  return ~(raw ^ crc_multiply(0xffffffffu, c.start_factor));
}

// Adler-32 from the sums over all the bytes (of `bytes` bytes): sum v_r, and sum (bytes - r) v_r.
FACEGEN_HOST_DEVICE inline uint32_t adler_finish(uint64_t sum, uint64_t weighted, uint64_t bytes) {
  const uint32_t a = static_cast<uint32_t>((1 + sum) % kAdlerModulus);
  const uint32_t b = static_cast<uint32_t>((bytes % kAdlerModulus + weighted % kAdlerModulus) % kAdlerModulus);
  return b << 16 | a;
}

}  // namespace checksum
}  // namespace facegen
