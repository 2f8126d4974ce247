#include "cli/saved_state.hpp"

#include <bulkbloom/incremental.hpp>

#include <optional>

#include "cli/filter_options.hpp"

namespace bulkbloom::cli {
namespace {

SavedState load_directory(const std::filesystem::path& path) {
  StateDirectory directory(path);
  FileState saved;
  switch (directory.stored_kind()) {
    case StateDirectory::Kind::window: {
      WindowedFilter window = directory.load_window(&saved);
      return {std::move(window), std::move(saved), true};
    }
    case StateDirectory::Kind::window_shard: {
      WindowShard shard = directory.load_window_shard(&saved);
      return {std::move(shard), std::move(saved), true};
    }
    case StateDirectory::Kind::grown:
      break;
  }
  CarriedFilter filter = CarriedFilter::load(directory, {}, &saved.metadata);
  return {std::move(filter), std::move(saved), true};
}

}  // namespace

const char* SavedState::kind_name() const {
  switch (state.index()) {
    case 0:
      return "grown filter";
    case 1:
      return "sliding window";
    default:
      return "sliding window shard";
  }
}

SavedState load_saved_state(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) return load_directory(path);
  FileState saved;
  if (file_kind(path) != FileKind::window) {
    CarriedFilter filter = CarriedFilter::load(path, kDefaultFpr, {}, &saved.metadata);
    return {std::move(filter), std::move(saved), false};
  }
  // A whole window loads as one (its generations may differ in size), a shard file as a shard;
  // a damaged file fails both loads with the same message.
  std::optional<WindowedFilter> whole;
  try {
    whole.emplace(load_window(path, &saved));
  } catch (const FormatError&) {
  }
  if (whole) return {std::move(*whole), std::move(saved), false};
  WindowShard shard = load_window_shard(path, &saved);
  return {std::move(shard), std::move(saved), false};
}

std::uint64_t save_saved_state(SavedState& state, const std::filesystem::path& path,
                               bool directory) {
  return std::visit(
      [&](auto& s) -> std::uint64_t {
        using State = std::decay_t<decltype(s)>;
        if (directory) {
          StateDirectory out(path);
          if constexpr (std::is_same_v<State, CarriedFilter>) {
            return out.save(s, state.saved.metadata);
          } else {
            return out.save(s, state.saved);
          }
        }
        if constexpr (std::is_same_v<State, CarriedFilter>) {
          s.save(path, state.saved.metadata);
        } else {
          save(s, path, state.saved);
        }
        return std::filesystem::file_size(path);
      },
      state.state);
}

}  // namespace bulkbloom::cli
