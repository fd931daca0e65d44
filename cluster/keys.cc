#include "cluster/keys.h"

namespace ringcast::cluster {

std::string members_key(std::string_view ns) {
  std::string k = "{";
  k.append(ns);
  k.append("}:members");
  return k;
}

std::string addr_key(std::string_view ns) {
  std::string k = "{";
  k.append(ns);
  k.append("}:addr");
  return k;
}

std::string partition_tag(std::string_view ns, Partition p) {
  std::string k = "{";
  k.append(ns);
  k.push_back(':');
  k.append(std::to_string(p));
  k.push_back('}');
  return k;
}

std::string partition_key(std::string_view ns, Partition p, std::string_view suffix) {
  std::string k = partition_tag(ns, p);
  k.push_back(':');
  k.append(suffix);
  return k;
}

std::string own_key(std::string_view ns, Partition p) {
  return partition_key(ns, p, "own");
}

std::string epoch_key(std::string_view ns, Partition p) {
  return partition_key(ns, p, "epoch");
}

}  // namespace ringcast::cluster
