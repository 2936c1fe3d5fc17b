#pragma once
// Sealed event lines: evidence that came from the harness.
//
// Note [Sealed event lines]
// The event log is a file the job can append to: `open(os.environ["OOMH_EVENTS"], "a").write(...)` made a job
// that never halved its batch pass batch_halving (issue 44). So every line the shim and the probes write
// carries a seal, a keyed BLAKE2b-128 of the line, under a key the runner draws for each attempt:
//
//   {"t":...,"pid":..,"src":"probe","kind":"step","fields":{...},"seal":"<32 hex digits>"}
//
// The seal covers the line as it would read without it (the text up to `,"seal":` followed by the closing
// `}`), so a reader strips it and parses what was sealed. The key travels in the attempt's control block
// (ControlBlock::seal_key), which every process of the job under the shim or the probe maps already; it is
// never in the environment or in a file the job's code reads by habit. The runner keeps its own copy (a job
// that rewrites the block's key changes what its later processes seal with, not what the runner checks
// with), reads the log, and treats a line that parses as an event but whose seal is missing or wrong as
// forged: dropped from the evidence, counted, and the job's verdict is an error (Note [Green means tested] in
// runner/include/oomharness/runner/untested.h). A line that is not an event at all stays what it was, a bad
// line with a warning.
// What this stops: a job's own code, or a tool it runs, writing or copying-and-editing event lines (a casual
// or accidental forgery), lines of another attempt pasted in (another key), a job that zeroes the key (its
// processes then seal nothing, and every line counts as forged). What it does not stop: code that maps the
// control block and reads the key at its offset, or reads the probe's memory in its own process, can seal
// what it likes; and a genuine line written twice (a copy of a whole sealed line) verifies twice. The key is
// a secret from the job's habits, not from a determined adversary inside the job: docs/cli.md says so.
// A block with an all-zero key (a shim on its own, a runner of an older version) seals nothing.
//
// BLAKE2b (RFC 7693) is written out here rather than linked: the shim is preloaded into any program and
// links nothing it does not need, and Python's hashlib.blake2b(key=, digest_size=16) computes the same seal
// (python/oomharness/_events.py). Nothing here allocates or throws: the shim seals inside its hooks.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include <unistd.h>

#include "oomharness/events.h"

namespace oomh::events {

inline constexpr size_t kSealKeyBytes = 32;
inline constexpr size_t kSealBytes = 16;
// `,"seal":"` + 32 hex digits + `"`: what a sealed line has before its closing brace.
inline constexpr std::string_view kSealPrefix = ",\"seal\":\"";
inline constexpr size_t kSealSuffixBytes = kSealPrefix.size() + 2 * kSealBytes + 1;

// True when `key` is not all zero (a block whose key the runner set).
inline bool seal_key_set(const unsigned char* key) {
  if (!key) return false;
  unsigned char any = 0;
  for (size_t i = 0; i < kSealKeyBytes; ++i) any |= key[i];
  return any != 0;
}

namespace blake2b_detail {
inline constexpr uint64_t kIv[8] = {0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull, 0x3c6ef372fe94f82bull,
                                    0xa54ff53a5f1d36f1ull, 0x510e527fade682d1ull, 0x9b05688c2b3e6c1full,
                                    0x1f83d9abfb41bd6bull, 0x5be0cd19137e2179ull};
inline constexpr uint8_t kSigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

inline uint64_t rotr(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }
inline uint64_t load64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct State {
  uint64_t h[8];
  uint64_t t = 0;  // bytes compressed so far (messages here are far below 2^64)
  unsigned char buf[128];
  size_t buffered = 0;

  void compress(const unsigned char* block, bool last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; ++i) m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; ++i) v[i] = h[i], v[i + 8] = kIv[i];
    v[12] ^= t;
    if (last) v[14] = ~v[14];
    auto g = [&](int a, int b, int c, int d, uint64_t x, uint64_t y) {
      v[a] = v[a] + v[b] + x;
      v[d] = rotr(v[d] ^ v[a], 32);
      v[c] = v[c] + v[d];
      v[b] = rotr(v[b] ^ v[c], 24);
      v[a] = v[a] + v[b] + y;
      v[d] = rotr(v[d] ^ v[a], 16);
      v[c] = v[c] + v[d];
      v[b] = rotr(v[b] ^ v[c], 63);
    };
    for (const auto& s : kSigma) {
      g(0, 4, 8, 12, m[s[0]], m[s[1]]);
      g(1, 5, 9, 13, m[s[2]], m[s[3]]);
      g(2, 6, 10, 14, m[s[4]], m[s[5]]);
      g(3, 7, 11, 15, m[s[6]], m[s[7]]);
      g(0, 5, 10, 15, m[s[8]], m[s[9]]);
      g(1, 6, 11, 12, m[s[10]], m[s[11]]);
      g(2, 7, 8, 13, m[s[12]], m[s[13]]);
      g(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; ++i) h[i] ^= v[i] ^ v[i + 8];
  }
  void update(const unsigned char* p, size_t n) {
    while (n > 0) {
      if (buffered == sizeof buf) {  // a full block is compressed only once more data follows it
        t += sizeof buf;
        compress(buf, false);
        buffered = 0;
      }
      const size_t take = n < sizeof buf - buffered ? n : sizeof buf - buffered;
      std::memcpy(buf + buffered, p, take);
      buffered += take;
      p += take;
      n -= take;
    }
  }
};
}  // namespace blake2b_detail

// BLAKE2b with a key of kSealKeyBytes and an output of `out_bytes` (at most 64) over `data`.
inline void blake2b_keyed(const unsigned char* key, const void* data, size_t size, unsigned char* out,
                          size_t out_bytes = kSealBytes) {
  blake2b_detail::State s;
  for (int i = 0; i < 8; ++i) s.h[i] = blake2b_detail::kIv[i];
  s.h[0] ^= 0x01010000ull ^ (static_cast<uint64_t>(kSealKeyBytes) << 8) ^ out_bytes;
  unsigned char block[128] = {};
  std::memcpy(block, key, kSealKeyBytes);
  s.update(block, sizeof block);
  s.update(static_cast<const unsigned char*>(data), size);
  s.t += s.buffered;
  std::memset(s.buf + s.buffered, 0, sizeof s.buf - s.buffered);
  s.compress(s.buf, true);
  unsigned char full[64];
  for (int i = 0; i < 8; ++i)
    for (int b = 0; b < 8; ++b) full[8 * i + b] = static_cast<unsigned char>(s.h[i] >> (8 * b));
  std::memcpy(out, full, out_bytes);
}

// The seal of `text` (an event line without its seal and without its newline), as 32 lowercase hex digits.
inline void seal_hex(const unsigned char* key, std::string_view text, char out[2 * kSealBytes]) {
  unsigned char mac[kSealBytes];
  blake2b_keyed(key, text.data(), text.size(), mac);
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < kSealBytes; ++i) {
    out[2 * i] = kHex[mac[i] >> 4];
    out[2 * i + 1] = kHex[mac[i] & 15];
  }
}

// Seals a finished event line (`line`, `size` bytes, ending in "}\n") into `out` (at least size +
// kSealSuffixBytes bytes). Returns the sealed line's size, or 0 when the line is not one EventLine finished.
inline size_t seal_line(const unsigned char* key, const char* line, size_t size, char* out, size_t capacity) {
  if (size < 3 || line[size - 1] != '\n' || line[size - 2] != '}' || capacity < size + kSealSuffixBytes) return 0;
  const size_t body = size - 2;  // up to the closing brace
  char hex[2 * kSealBytes];
  std::memcpy(out, line, size - 1);  // the text that is sealed: the line with its brace, without the newline
  seal_hex(key, std::string_view(out, size - 1), hex);
  size_t n = body;
  std::memcpy(out + n, kSealPrefix.data(), kSealPrefix.size());
  n += kSealPrefix.size();
  std::memcpy(out + n, hex, sizeof hex);
  n += sizeof hex;
  out[n++] = '"';
  out[n++] = '}';
  out[n++] = '\n';
  return n;
}

// What a line read back from the log is (no newline in `line`).
enum class SealCheck { sealed, unsealed, wrong };

// Checks the seal of `line` under `key`. For a sealed line, `text` gets what was sealed (the line without
// its seal), which the caller parses; it must hold line.size() bytes.
inline SealCheck check_seal(const unsigned char* key, std::string_view line, char* text, size_t* text_size) {
  const size_t n = line.size();
  if (n < kSealSuffixBytes + 2 || line[n - 1] != '}' || line[n - 2] != '"') return SealCheck::unsealed;
  const size_t at = n - 1 - kSealSuffixBytes;  // where `,"seal":"` begins
  if (line.substr(at, kSealPrefix.size()) != kSealPrefix) return SealCheck::unsealed;
  std::memcpy(text, line.data(), at);
  text[at] = '}';
  *text_size = at + 1;
  char hex[2 * kSealBytes];
  seal_hex(key, std::string_view(text, at + 1), hex);
  // Compared in full (no early exit): the runner is not an oracle a job can time, but it costs nothing.
  unsigned char diff = 0;
  for (size_t i = 0; i < sizeof hex; ++i) diff |= static_cast<unsigned char>(hex[i] ^ line[at + kSealPrefix.size() + i]);
  return diff == 0 ? SealCheck::sealed : SealCheck::wrong;
}

// Appends `line` to `fd` in one write, sealed under `key` when the key is set (else as it is). Returns false
// when the write failed or was short. The sealed copy lives on the stack: no allocation.
inline bool write_sealed(EventLine& line, int fd, const unsigned char* key) {
  if (fd < 0) return false;
  if (!seal_key_set(key)) return line.write_to(fd);
  char out[EventLine::kCapacity + kSealSuffixBytes + 8];
  const size_t n = seal_line(key, line.data(), line.size(), out, sizeof out);
  if (n == 0) return line.write_to(fd);  // never reached: EventLine always ends a line with "}\n"
  const ssize_t w = ::write(fd, out, n);
  return w == static_cast<ssize_t>(n);
}

}  // namespace oomh::events
