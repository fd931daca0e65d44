// Result<T>: a value or a trivially copyable Error. No exceptions on the hot path (STYLE 7);
// boundaries (RocksDB, sockets, config) convert their failures into an Error.
#pragma once

#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>

#include "core/check.h"

namespace ringcast {

enum class Errc : uint8_t {
  kOk = 0,
  kInvalidArgument,  // bad input from a caller (API, CLI, config)
  kNotFound,
  kConflict,       // e.g. same event id, other payload (SPEC R12.5)
  kCorruption,     // a stored value that does not decode
  kIo,             // disk or socket failure
  kUnavailable,    // shutting down, queue full, breaker open, ...
  kLimitExceeded,  // a configured bound was hit
  kInternal,       // a bug: an invariant broke
};

const char* errc_name(Errc c);

// All strings point at static storage (literals). `reason` is the machine-readable code an
// API answers with (e.g. "not_https", "conflict"; errc_name(code) when null), `field` names
// the input field at fault, so the API can answer {"error": {"code", "message", "field"}}.
struct Error {
  Errc code = Errc::kInternal;
  const char* message = "";
  const char* field = nullptr;
  const char* reason = nullptr;
  int sys_errno = 0;

  const char* reason_or_code() const { return reason ? reason : errc_name(code); }
};
static_assert(std::is_trivially_copyable_v<Error>);

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : ok_(true) { new (&value_) T(std::move(value)); }  // NOLINT: implicit
  Result(Error error) : ok_(false), error_(error) {}                  // NOLINT: implicit
  Result(const Result& o) : ok_(o.ok_) {
    if (ok_)
      new (&value_) T(o.value_);
    else
      error_ = o.error_;
  }
  Result(Result&& o) noexcept : ok_(o.ok_) {
    if (ok_)
      new (&value_) T(std::move(o.value_));
    else
      error_ = o.error_;
  }
  Result& operator=(Result o) noexcept {
    this->~Result();
    new (this) Result(std::move(o));
    return *this;
  }
  ~Result() {
    if (ok_) value_.~T();
  }

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  T& value() & {
    RC_CHECK(ok_);
    return value_;
  }
  const T& value() const& {
    RC_CHECK(ok_);
    return value_;
  }
  T&& value() && {
    RC_CHECK(ok_);
    return std::move(value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const {
    RC_CHECK(!ok_);
    return error_;
  }

 private:
  bool ok_;
  union {
    T value_;
    Error error_;
  };
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : ok_(false), error_(error) {}  // NOLINT: implicit
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    RC_CHECK(!ok_);
    return error_;
  }

 private:
  bool ok_ = true;
  Error error_{};
};

inline Result<void> ok() {
  return {};
}
inline Error make_error(Errc code, const char* message, const char* field = nullptr,
                        const char* reason = nullptr) {
  return Error{code, message, field, reason, 0};
}

}  // namespace ringcast
