// Tests only: a TCP port on 127.0.0.1 that nothing listens on right now.
#ifndef SHARDLIGHT_LIGHTNING_CLUSTER_FREE_PORT_H_
#define SHARDLIGHT_LIGHTNING_CLUSTER_FREE_PORT_H_

namespace shardlight::lightning::cluster {

int FreePort();

}  // namespace shardlight::lightning::cluster

#endif  // SHARDLIGHT_LIGHTNING_CLUSTER_FREE_PORT_H_
