// The delivery log's query semantics (SPEC R10.2; docs/operations.md "Delivery log"), written
// once for every backend: the limits, the cursor, the status filter, how a page is put together
// from an index read newest first, and when a page ends. A backend says only how it scans its
// own keys (a DeliveryScan, a NotificationScan): RocksStore iterates its index column families
// (storage/rocks_reads.cc), RedisStore reads its index ZSETs (storage/redis_reads.cc).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "core/store.h"
#include "core/types.h"

namespace ringcast::storage {

// Index entries one list_deliveries call reads at most: a page can hold fewer than its limit
// with a cursor when a status filter skipped many entries.
inline constexpr size_t kListScanMax = 10'000;
// Ids a page fetches at once (a backend may fetch more: RedisStore as many as the page holds).
inline constexpr size_t kListFetchChunk = 64;

// A delivery index of one tenant (or of one of its endpoints), newest first, as one backend
// keeps it.
class DeliveryScan {
 public:
  virtual ~DeliveryScan() = default;
  // The next ids of the index, at most `at_most` (fewer: the backend's chunk, or the index
  // ends); empty at the end.
  virtual Result<std::vector<DeliveryId>> next(size_t at_most) = 0;
  // Whether the index holds ids past those next() gave. False, too, for a scan that reads its
  // index once: then nobody asks next() again.
  virtual bool goes_on() const = 0;
  // The deliveries of `ids`, aligned with them: nullopt for one retention removed after its
  // index entry was read.
  virtual Result<std::vector<std::optional<Delivery>>> fetch(
      const std::vector<DeliveryId>& ids) = 0;
};

// A tenant's notification index, newest first, as one backend keeps it. Its entries are those
// of a 64-bit tenant hash: collect_notifications keeps the tenant's.
class NotificationScan {
 public:
  virtual ~NotificationScan() = default;
  // The next notifications, at most `at_most`, decoded; empty at the end.
  virtual Result<std::vector<Notification>> next(size_t at_most) = 0;
  // As DeliveryScan::goes_on.
  virtual bool goes_on() const = 0;
};

// What list_deliveries asks, checked: the limit clamped to [1, kListLimitMax] and the cursor
// decoded (the id the page starts after, excluded; none: from the newest). A malformed cursor
// answers kInvalidArgument, reason "invalid_cursor".
struct PageQuery {
  std::optional<DeliveryStatus> status;
  size_t limit = 1;
  std::optional<DeliveryId> after;
};
Result<PageQuery> page_query(std::optional<DeliveryStatus> status, size_t limit,
                             std::string_view cursor);

// list_deliveries: the deliveries of `scan` (which starts after q.after) that still exist and
// have q.status, newest first, until the page holds q.limit or kListScanMax entries were read.
// The cursor names the last entry looked at, when the index goes on past it.
Result<DeliveryPage> collect_page(const PageQuery& q, DeliveryScan& scan);

// recent_deliveries: the first `limit` (at most kListLimitMax) deliveries of `scan` that still
// exist. A scan that goes on is read again for those retention removed meanwhile.
Result<std::vector<Delivery>> collect_recent(size_t limit, DeliveryScan& scan);

// list_notifications: the first `limit` (at most kListLimitMax) notifications of `scan` that are
// `tenant`'s.
Result<std::vector<Notification>> collect_notifications(std::string_view tenant, size_t limit,
                                                        NotificationScan& scan);

}  // namespace ringcast::storage
