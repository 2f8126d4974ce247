// Options shared by the subcommands that make or open filters: sizing, backend, threads.
#pragma once

#include <bulkbloom/filter.hpp>

#include <cstdint>
#include <string>

#include "cli/args.hpp"
#include "cli/chunk_reader.hpp"

namespace bulkbloom::cli {

/// Declares --capacity, --fpr, --shape, --seed.
void add_sizing_options(ArgParser& parser);
/// Declares --threads, --backend.
void add_backend_options(ArgParser& parser);

/// Options from --threads and --backend (auto, cpu, cuda).
Options backend_options(const ArgParser& parser);

/// The layout from --capacity (or, without it, an estimate of the record count of `reader`'s
/// inputs, which must then all be regular files), --fpr, --shape and --seed. Sets
/// `capacity_note` to say where the capacity came from.
Layout sized_layout(const ArgParser& parser, const ChunkReader& reader, const RecordFormat& format,
                    std::string& capacity_note);

}  // namespace bulkbloom::cli
