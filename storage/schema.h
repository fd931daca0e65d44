// The column families of the RocksDB store and what lives in each (docs/storage-schema.md).
// Invariant: the order of kColumnFamilies is the order of the handles RocksStore keeps; the
// names are the on-disk contract and never change meaning (a new layout gets a new name).
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace ringcast::storage {

enum Cf : size_t {
  kCfMeta = 0,         // "default": schema version, id high-water marks
  kCfEvents,           // id -> event (payload stored once)
  kCfActive,           // id -> non-terminal delivery (what recovery scans)
  kCfArchive,          // id -> terminal delivery
  kCfAttempts,         // delivery id | number -> attempt (append-only)
  kCfEndpoints,        // id -> endpoint
  kCfTenants,          // partition | name -> tenant state
  kCfIdempotency,      // partition | tenant | event id -> EventKeyRecord
  kCfTenantIndex,      // partition | tenant hash | ~delivery id -> ""
  kCfEndpointIndex,    // partition | tenant hash | endpoint | ~delivery id -> ""
  kCfEventDeliveries,  // event id | delivery id -> ""
  kCfNotifications,    // partition | tenant hash | ~seq -> notification
  kCfExpiry,           // partition | stamp ms | kind | id -> (tenant hash for notifications)
  kCfCreated,          // id -> the delivery as created (written once, with its event's fan-out)
  kCfCount
};

inline constexpr std::array<std::string_view, kCfCount> kColumnFamilies = {"default",
                                                                           "events",
                                                                           "deliveries_active",
                                                                           "deliveries_archive",
                                                                           "attempts",
                                                                           "endpoints",
                                                                           "tenants",
                                                                           "idempotency",
                                                                           "idx_tenant",
                                                                           "idx_endpoint",
                                                                           "event_deliveries",
                                                                           "notifications",
                                                                           "expiry",
                                                                           "deliveries_created"};

inline constexpr std::string_view kSchemaKey = "schema";
// '2': events carry their message id (kEventInLogWithMessageId, SPEC R11.3). A store at
// '1' opens and is marked '2' (its old events get legacy_message_id()); a binary that knows only
// '1' then refuses the store instead of misreading its new records.
inline constexpr char kSchemaVersion = '2';
inline constexpr char kSchemaVersionBeforeMessageIds = '1';

}  // namespace ringcast::storage
