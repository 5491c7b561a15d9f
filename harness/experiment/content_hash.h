#pragma once
// Content hashes recorded in run manifests so `lantern rerun` can say when the
// weights or the tokenizer changed. Not cryptographic: a 64-bit multiply-mix
// over 8-byte words in four lanes (1.5-1.8 GB/s from the page cache on the
// loaded 2-core CI machine, so 2.5 GB of weights cost about a second a run),
// written as 16 hex digits.
#include <filesystem>
#include <string>
#include <vector>

namespace lantern::experiment {

std::string hash_bytes(const void* data, size_t n, uint64_t seed = 0);
// Throws naming the file when it cannot be read.
std::string hash_file(const std::filesystem::path& file);
// The weights of a model directory: every *.safetensors file, in name order
// (one shard or many), hashed together.
std::string hash_weights(const std::filesystem::path& model_dir);

}  // namespace lantern::experiment
