#include "redis/reply.h"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <charconv>
#include <cstdlib>
#include <new>

#include "core/check.h"

namespace ringcast::redis {

// The reader's object functions build Reply trees directly (no redisReply in between): the
// root is allocated with new, every child lives inside its parent's elements vector, which is
// sized once by the array header and never resized, so the pointers hiredis keeps for the
// tasks stay valid. hiredis 0.14 frees only the root (freeObject on r->reply), which is
// checked against Context::root so that a child is never deleted on its own.
struct ReaderAccess {
  struct Ctx {
    Reply* root = nullptr;
    uint32_t max_array_elements = 0;
    bool limit_hit = false;
  };

  // hiredis copies the reader's privdata into the root task; children are reached from it.
  static Ctx* ctx_of(const redisReadTask* task) {
    while (task->parent != nullptr && task->privdata == nullptr) task = task->parent;
    return static_cast<Ctx*>(task->privdata);
  }

  static Reply* place(const redisReadTask* task) {
    Ctx* ctx = ctx_of(task);
    if (task->parent != nullptr) {
      auto* parent = static_cast<Reply*>(task->parent->obj);
      RC_CHECK(parent != nullptr && parent->type_ == Reply::Type::kArray);
      if (task->idx < 0 || static_cast<size_t>(task->idx) >= parent->elements_.size()) {
        return nullptr;
      }
      return &parent->elements_[static_cast<size_t>(task->idx)];
    }
    auto* r = new (std::nothrow) Reply();
    if (r != nullptr) ctx->root = r;
    return r;
  }

  static void* create_string(const redisReadTask* task, char* str, size_t len) {
    Reply* r = place(task);
    if (r == nullptr) return nullptr;
    switch (task->type) {
      case REDIS_REPLY_ERROR:
        r->type_ = Reply::Type::kError;
        break;
      case REDIS_REPLY_STATUS:
        r->type_ = Reply::Type::kStatus;
        break;
      default:
        r->type_ = Reply::Type::kString;
        break;
    }
    if (len >= Reply::kSlackFrom) r->str_.reserve(len + Reply::kStringSlack);
    r->str_.assign(str, len);
    return r;
  }

  static void* create_array(const redisReadTask* task, int elements) {
    Ctx* ctx = ctx_of(task);
    if (elements < 0 || static_cast<uint32_t>(elements) > ctx->max_array_elements) {
      ctx->limit_hit = true;
      return nullptr;  // hiredis turns this into a reader error
    }
    Reply* r = place(task);
    if (r == nullptr) return nullptr;
    r->type_ = Reply::Type::kArray;
    r->elements_.resize(static_cast<size_t>(elements));
    return r;
  }

  static void* create_integer(const redisReadTask* task, long long value) {
    Reply* r = place(task);
    if (r == nullptr) return nullptr;
    r->type_ = Reply::Type::kInteger;
    r->integer_ = value;
    return r;
  }

  static void* create_nil(const redisReadTask* task) {
    Reply* r = place(task);
    if (r == nullptr) return nullptr;
    r->type_ = Reply::Type::kNil;
    return r;
  }

  static void free_object(void* obj) {
    // Called by hiredis on the root only; see the comment above. The context is reached
    // through the reader, so this takes the pointer alone and trusts that it is a root.
    delete static_cast<Reply*>(obj);
  }
};

struct ReplyReader::Context : ReaderAccess::Ctx {};

namespace {

redisReplyObjectFunctions kFunctions = {
    ReaderAccess::create_string, ReaderAccess::create_array, ReaderAccess::create_integer,
    ReaderAccess::create_nil,    ReaderAccess::free_object,
};

}  // namespace

// --- Reply ---------------------------------------------------------------------------------------

Reply Reply::integer(int64_t v) {
  Reply r;
  r.type_ = Type::kInteger;
  r.integer_ = v;
  return r;
}

Reply Reply::status(std::string s) {
  Reply r;
  r.type_ = Type::kStatus;
  r.str_ = std::move(s);
  return r;
}

Reply Reply::string(std::string s) {
  Reply r;
  r.type_ = Type::kString;
  r.str_ = std::move(s);
  return r;
}

Reply Reply::error(std::string message) {
  Reply r;
  r.type_ = Type::kError;
  r.str_ = std::move(message);
  return r;
}

Reply Reply::array(std::vector<Reply> elements) {
  Reply r;
  r.type_ = Type::kArray;
  r.elements_ = std::move(elements);
  return r;
}

std::string_view Reply::error_code() const {
  if (!is_error()) return {};
  std::string_view s(str_);
  return s.substr(0, s.find(' '));
}

bool operator==(const Reply& a, const Reply& b) {
  return a.type_ == b.type_ && a.integer_ == b.integer_ && a.str_ == b.str_ &&
         a.elements_ == b.elements_;
}

std::string Reply::debug_string() const {
  switch (type_) {
    case Type::kNil:
      return "nil";
    case Type::kInteger:
      return "(integer) " + std::to_string(integer_);
    case Type::kStatus:
      return "+" + str_;
    case Type::kString:
      return "\"" + str_ + "\"";
    case Type::kError:
      return "-" + str_;
    case Type::kArray: {
      std::string s = "[";
      for (size_t i = 0; i < elements_.size(); ++i) {
        if (i > 0) s += ", ";
        s += elements_[i].debug_string();
      }
      return s + "]";
    }
  }
  return "?";
}

// --- ReplyReader ---------------------------------------------------------------------------------

ReplyReader::ReplyReader(const ReaderLimits& limits) : limits_(limits) {
  create();
}

ReplyReader::~ReplyReader() {
  if (r_ != nullptr) redisReaderFree(r_);
  delete ctx_;
}

void ReplyReader::create() {
  if (ctx_ == nullptr) ctx_ = new Context();
  ctx_->root = nullptr;
  ctx_->limit_hit = false;
  ctx_->max_array_elements = limits_.max_array_elements;
  r_ = redisReaderCreateWithFunctions(&kFunctions);
  if (r_ != nullptr) {
    r_->privdata = ctx_;
    r_->maxbuf = 64 * 1024;  // keep a 64 KiB buffer between replies, free larger ones
  }
}

void ReplyReader::reset() {
  if (r_ != nullptr) redisReaderFree(r_);
  r_ = nullptr;
  create();
}

size_t ReplyReader::buffered_bytes() const {
  return r_ == nullptr ? 0 : r_->len - r_->pos;
}

const char* ReplyReader::last_error_text() const {
  return r_ == nullptr ? "reader not allocated" : r_->errstr;
}

Result<void> ReplyReader::feed(const char* data, size_t len) {
  if (r_ == nullptr) return make_error(Errc::kInternal, "redis: reader could not be allocated");
  if (r_->err != 0) return make_error(Errc::kCorruption, "redis: protocol error in reply");
  if (buffered_bytes() + len > limits_.max_buffered_bytes) {
    return make_error(Errc::kLimitExceeded, "redis: reply larger than max_buffered_bytes", nullptr,
                      "redis_reply_too_large");
  }
  if (redisReaderFeed(r_, data, len) != REDIS_OK) {
    return make_error(Errc::kInternal, "redis: out of memory feeding the reader");
  }
  return ok();
}

Result<std::optional<Reply>> ReplyReader::next() {
  if (r_ == nullptr) return make_error(Errc::kInternal, "redis: reader could not be allocated");
  void* obj = nullptr;
  if (redisReaderGetReply(r_, &obj) != REDIS_OK) {
    if (ctx_->limit_hit) {
      return make_error(Errc::kLimitExceeded, "redis: reply array larger than max_array_elements",
                        nullptr, "redis_reply_too_large");
    }
    return make_error(Errc::kCorruption, "redis: protocol error in reply", nullptr,
                      "redis_protocol");
  }
  if (obj == nullptr) return std::optional<Reply>();
  auto* root = static_cast<Reply*>(obj);
  RC_CHECK(root == ctx_->root);
  ctx_->root = nullptr;
  std::optional<Reply> out(std::move(*root));
  delete root;
  return out;
}

// --- encoding ------------------------------------------------------------------------------------

// Written here rather than by redisFormatCommandArgv: hiredis formats every length with
// sprintf and builds the command in a buffer of its own, then copied; per pipelined EVAL of a
// batch (tens of arguments) that was 2-3 % of the cluster daemon's CPU (perf,
// bench/e2e_cluster.sh). The bytes are the same (RedisReplyTest.EncodingMatchesHiredis).
Result<void> encode_command(std::span<const std::string_view> args, std::string* out) {
  if (args.empty()) return make_error(Errc::kInvalidArgument, "redis: empty command");
  char num[24];
  auto header = [&](char tag, size_t n) {
    num[0] = tag;
    char* end = std::to_chars(num + 1, num + sizeof num - 2, n).ptr;
    *end++ = '\r';
    *end++ = '\n';
    out->append(num, static_cast<size_t>(end - num));
  };
  header('*', args.size());
  for (std::string_view a : args) {
    header('$', a.size());
    out->append(a.data(), a.size());
    out->append("\r\n", 2);
  }
  return ok();
}

}  // namespace ringcast::redis
