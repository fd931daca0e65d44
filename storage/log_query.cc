#include "storage/log_query.h"

#include <algorithm>
#include <utility>

#include "storage/codec.h"

namespace ringcast::storage {

Result<PageQuery> page_query(std::optional<DeliveryStatus> status, size_t limit,
                             std::string_view cursor) {
  PageQuery q;
  q.status = status;
  q.limit = std::clamp<size_t>(limit, 1, kListLimitMax);
  auto after = decode_list_cursor(cursor);
  if (!after) return after.error();
  q.after = *after;
  return q;
}

Result<DeliveryPage> collect_page(const PageQuery& q, DeliveryScan& scan) {
  DeliveryPage page;
  size_t scanned = 0;
  DeliveryId last_consumed = 0;
  bool more = false;
  while (true) {
    auto ids = scan.next(kListScanMax - scanned);
    if (!ids) return ids.error();
    if (ids->empty()) break;
    scanned += ids->size();
    auto ds = scan.fetch(*ids);
    if (!ds) return ds.error();
    bool full = false;
    for (size_t i = 0; i < ids->size(); ++i) {
      last_consumed = (*ids)[i];
      const std::optional<Delivery>& d = (*ds)[i];
      if (d && (!q.status || d->status == *q.status)) {
        page.items.push_back(*d);
        if (page.items.size() == q.limit) {
          more = i + 1 < ids->size() || scan.goes_on();
          full = true;
          break;
        }
      }
    }
    if (full) break;
    if (scanned >= kListScanMax) {
      more = scan.goes_on();
      break;
    }
    if (!scan.goes_on()) break;
  }
  if (more) page.next_cursor = encode_cursor(last_consumed);
  return page;
}

Result<std::vector<Delivery>> collect_recent(size_t limit, DeliveryScan& scan) {
  limit = std::min(limit, kListLimitMax);
  std::vector<Delivery> out;
  // Normally one pass; more only when retention removed deliveries under our feet.
  while (out.size() < limit) {
    auto ids = scan.next(limit - out.size());
    if (!ids) return ids.error();
    if (ids->empty()) break;
    auto ds = scan.fetch(*ids);
    if (!ds) return ds.error();
    for (std::optional<Delivery>& d : *ds) {
      if (d) out.push_back(std::move(*d));
    }
    if (!scan.goes_on()) break;
  }
  return out;
}

Result<std::vector<Notification>> collect_notifications(std::string_view tenant, size_t limit,
                                                        NotificationScan& scan) {
  limit = std::min(limit, kListLimitMax);
  std::vector<Notification> out;
  while (out.size() < limit) {
    auto got = scan.next(limit - out.size());
    if (!got) return got.error();
    if (got->empty()) break;
    for (Notification& n : *got) {
      if (n.tenant == tenant) out.push_back(std::move(n));  // a 64-bit hash collision
    }
    if (!scan.goes_on()) break;
  }
  return out;
}

}  // namespace ringcast::storage
