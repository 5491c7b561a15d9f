#pragma once
// JSON forms of the run-directory records (memory.json, kv.json,
// outputs.jsonl lines). Parsers throw one-line errors naming the file and key.
#include <string>

#include <nlohmann/json.hpp>

#include "harness/runfmt/records.h"

namespace lantern::runfmt {

nlohmann::json memory_to_json(const MemoryMap& m);
MemoryMap memory_from_json(const nlohmann::json& j, const std::string& file = "memory.json");

nlohmann::json kv_to_json(const KvData& kv);
KvData kv_from_json(const nlohmann::json& j, const std::string& file = "kv.json");

nlohmann::json output_to_json(const OutputRow& o);
OutputRow output_from_json(const nlohmann::json& j, const std::string& file = "outputs.jsonl");

// Fills the typed fields of a manifest from its JSON (checks the version).
Manifest manifest_from_json(nlohmann::json j, const std::string& file = "manifest.json");

}  // namespace lantern::runfmt
