//! Redis Cluster, as plain Rust: a key's hash slot, which node serves a
//! slot as `CLUSTER NODES` tells it, and what a waiter whose keys are not
//! here is answered (the server's side: `redis::ffi::cluster`).
//!
//! Why a waiter needs this: resharding moves a slot's keys one by one with
//! `MIGRATE`, which deletes each from the node giving the slot up, and the
//! waiters of a moved key learn it is gone like any removed key. Redis
//! redirects clients blocked on keys itself, but not the module's (blocked
//! on no key of Redis's), so before a waiter is decided its node checks
//! that it still serves the keys, and otherwise answers as Redis answers a
//! command sent to the wrong node, which every cluster client follows
//! (docs/operations.md, "What resharding does to waiters").

use crate::error::CommandError;

/// How many hash slots a Redis Cluster has.
const SLOTS: u16 = 16384;

/// Which node serves a key's slot, as this node sees the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotOwner {
    /// Not a cluster node: every key is served here.
    NotCluster,
    /// This node serves the slot, and is not giving it away.
    Here { slot: u16 },
    /// This node serves the slot and is moving it to the node at `to`
    /// (`ip:port`): the slot is `MIGRATING` here, and keys already moved
    /// are gone from here (Redis answers `ASK` for them).
    MigratingTo { slot: u16, to: String },
    /// Another node serves the slot and is moving it here (`IMPORTING`):
    /// commands sent after `ASKING` run here.
    Importing { slot: u16 },
    /// The node at `node` (`ip:port`) serves the slot (this node may be its
    /// replica).
    Elsewhere { slot: u16, node: String },
    /// No node serves the slot (unassigned, or its node's address unknown).
    Unserved { slot: u16 },
    /// The cluster's layout could not be read.
    Unknown { slot: u16 },
}

/// The hash slot of `key`: CRC16 (XMODEM) of the key, or of its hash tag
/// (what lies between the first `{` and the first `}` after it, when that
/// is not empty), modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) % SLOTS
}

/// The part of `key` between its first `{` and the next `}`, if not empty.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = key.get(open + 1..)?;
    let close = rest.iter().position(|&b| b == b'}')?;
    rest.get(..close).filter(|tag| !tag.is_empty())
}

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the hash
/// Redis Cluster uses.
fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &byte| {
        (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
            if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            }
        })
    })
}

/// One line of `CLUSTER NODES`: `<id> <ip:port@bus[,hostname...]> <flags>
/// <primary> <ping> <pong> <epoch> <link> <slot>...`, where a slot entry is
/// `7`, `0-5460`, or, on this node's own line only, `[7->-<id>]` (migrating
/// to that node) or `[7-<-<id>]` (importing from it).
struct NodeLine<'a> {
    id: &'a str,
    /// `ip:port`; `None` when the node's address is not known yet.
    address: Option<&'a str>,
    myself: bool,
    slots: Vec<&'a str>,
}

impl<'a> NodeLine<'a> {
    fn parse(line: &'a str) -> Option<Self> {
        let mut fields = line.split_ascii_whitespace();
        let id = fields.next()?;
        let address = fields.next()?.split(['@', ',']).next().filter(|address| {
            address.rsplit_once(':').is_some_and(|(ip, port)| {
                !ip.is_empty() && port.parse::<u16>().is_ok_and(|port| port > 0)
            })
        });
        let flags = fields.next()?;
        // The primary, ping, pong, epoch and link state.
        if fields.by_ref().take(5).count() < 5 {
            return None;
        }
        Some(Self {
            id,
            address,
            myself: flags.split(',').any(|flag| flag == "myself"),
            slots: fields.collect(),
        })
    }

    /// Whether the line lists `slot` as served by the node.
    fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|entry| {
            if entry.starts_with('[') {
                return false;
            }
            let (first, last) = entry.split_once('-').unwrap_or((entry, entry));
            matches!((first.parse::<u16>(), last.parse::<u16>()),
                (Ok(first), Ok(last)) if (first..=last).contains(&slot))
        })
    }

    /// The id of the node `slot` is moving to (`arrow` `->-`) or from
    /// (`-<-`), if this line tells so.
    fn moving(&self, slot: u16, arrow: &str) -> Option<&'a str> {
        let prefix = format!("[{slot}{arrow}");
        self.slots
            .iter()
            .find_map(|entry| entry.strip_prefix(prefix.as_str())?.strip_suffix(']'))
    }
}

/// Who serves `slot`, as the `CLUSTER NODES` text `nodes` tells it.
pub fn owner_in(nodes: &str, slot: u16) -> SlotOwner {
    let lines: Vec<NodeLine<'_>> = nodes.lines().filter_map(NodeLine::parse).collect();
    let Some(me) = lines.iter().find(|line| line.myself) else {
        return SlotOwner::Unknown { slot };
    };
    let address_of = |id: &str| lines.iter().find(|line| line.id == id)?.address;
    if me.serves(slot) {
        return match me.moving(slot, "->-") {
            None => SlotOwner::Here { slot },
            Some(to) => match address_of(to) {
                Some(to) => SlotOwner::MigratingTo {
                    slot,
                    to: to.to_string(),
                },
                None => SlotOwner::Unknown { slot },
            },
        };
    }
    if me.moving(slot, "-<-").is_some() {
        return SlotOwner::Importing { slot };
    }
    match lines.iter().find(|line| line.serves(slot)) {
        Some(NodeLine {
            address: Some(node),
            ..
        }) => SlotOwner::Elsewhere {
            slot,
            node: node.to_string(),
        },
        _ => SlotOwner::Unserved { slot },
    }
}

/// What a waiter is answered instead of being decided here, its keys' slot
/// served as `owner` says and some of its keys missing here (`all_missing`:
/// every one of them); `None`: it is decided here. What Redis answers a
/// command on such keys:
/// - a slot served here, not moving: `None`, the keys were removed here
///   (deleted, expired...) and the waiter is decided against that;
/// - a slot moving away: `ASK` to the node receiving it when every key has
///   gone there; `TRYAGAIN` when only some have (the rest follow shortly);
/// - a slot moving here (`IMPORTING`): `None`, the waiter came with `ASKING`
///   (it could not have waited here otherwise), and Redis runs such a
///   command here;
/// - a slot another node serves: `MOVED` to it;
/// - a slot nobody serves: `CLUSTERDOWN Hash slot not served`;
/// - a layout that could not be read: `TRYAGAIN` (never decided blind).
pub fn redirect(owner: &SlotOwner, all_missing: bool) -> Option<CommandError> {
    match owner {
        SlotOwner::NotCluster | SlotOwner::Here { .. } | SlotOwner::Importing { .. } => None,
        SlotOwner::MigratingTo { slot, to } if all_missing => Some(CommandError::ask(*slot, to)),
        SlotOwner::MigratingTo { .. } => Some(CommandError::keys_being_moved()),
        SlotOwner::Elsewhere { slot, node } => Some(CommandError::moved(*slot, node)),
        SlotOwner::Unserved { .. } => Some(CommandError::slot_not_served()),
        SlotOwner::Unknown { .. } => Some(CommandError::cluster_layout_unknown()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slots as `CLUSTER KEYSLOT` of Redis 7.0.15 gave them.
    #[test]
    fn key_slots_are_the_ones_redis_computes() {
        let known: &[(&[u8], u16)] = &[
            (b"", 0),
            (b"foo", 12182),
            (b"bar", 5061),
            (b"a", 15495),
            (b"123456789", 12739),
            (b"ratelimit:user:42", 11410),
            ("é".as_bytes(), 10180),
            (b"t644", 7),
            (b"{t644}", 7),
            (b"{t644}:k", 7),
            (b"user1000", 3443),
            (b"{user1000}.following", 3443),
            (b"foo{bar}{zap}", 5061),
            (b"foo{}{bar}", 8363),
            (b"foo{{bar}}zap", 4015),
            (b"{}foo", 9500),
            (b"{", 4092),
            (b"}{x}", 16287),
        ];
        for &(key, slot) in known {
            assert_eq!(key_slot(key), slot, "{}", String::from_utf8_lossy(key));
        }
    }

    const B: &str = "bbbb";

    /// A `CLUSTER NODES` text where this node (`aaaa`, port 7001) serves
    /// the slot entries `mine`, `bbbb` (7002, written as Redis 7.2+ and
    /// Valkey write it) serves 5461-10922 and `cccc` (7003) 10923-16383,
    /// and `dddd` replicates this node.
    fn nodes(mine: &str) -> String {
        format!(
            "aaaa 127.0.0.1:7001@17001 myself,master - 0 0 1 connected {mine}\n\
             {B} 127.0.0.1:7002@17002,,shard-id=x master - 0 1 2 connected 5461-10922\n\
             cccc 127.0.0.1:7003@17003 master - 0 1 3 connected 10923-16383\n\
             dddd 127.0.0.1:7004@17004 slave aaaa 0 1 1 connected\n"
        )
    }

    #[test]
    fn a_slot_this_node_serves_is_here() {
        assert_eq!(owner_in(&nodes("0-5460"), 7), SlotOwner::Here { slot: 7 });
        assert_eq!(owner_in(&nodes("7"), 7), SlotOwner::Here { slot: 7 });
        assert_eq!(owner_in(&nodes("0-5460"), 0), SlotOwner::Here { slot: 0 });
        assert_eq!(
            owner_in(&nodes("0-5460"), 5460),
            SlotOwner::Here { slot: 5460 }
        );
    }

    #[test]
    fn a_slot_migrating_from_this_node_names_the_node_receiving_it() {
        let text = nodes(&format!("0-5460 [7->-{B}]"));
        assert_eq!(
            owner_in(&text, 7),
            SlotOwner::MigratingTo {
                slot: 7,
                to: "127.0.0.1:7002".into()
            }
        );
        assert_eq!(owner_in(&text, 8), SlotOwner::Here { slot: 8 });
    }

    #[test]
    fn a_slot_migrating_here_is_importing() {
        let text = nodes(&format!("0-6 8-5460 [7-<-{B}]"));
        assert_eq!(owner_in(&text, 7), SlotOwner::Importing { slot: 7 });
    }

    #[test]
    fn a_slot_another_node_serves_names_it() {
        for slot in [5461, 7000, 10922] {
            assert_eq!(
                owner_in(&nodes("0-5460"), slot),
                SlotOwner::Elsewhere {
                    slot,
                    node: "127.0.0.1:7002".into()
                }
            );
        }
        // After a reshard: slot 7 went to bbbb.
        let text = nodes("0-6 8-5460").replace("5461-10922", "7 5461-10922");
        assert_eq!(
            owner_in(&text, 7),
            SlotOwner::Elsewhere {
                slot: 7,
                node: "127.0.0.1:7002".into()
            }
        );
    }

    #[test]
    fn a_replica_sees_its_primarys_slots_elsewhere() {
        let text = "aaaa 127.0.0.1:7001@17001 master - 0 0 1 connected 0-16383\n\
                    dddd 127.0.0.1:7004@17004 myself,slave aaaa 0 0 1 connected\n";
        assert_eq!(
            owner_in(text, 7),
            SlotOwner::Elsewhere {
                slot: 7,
                node: "127.0.0.1:7001".into()
            }
        );
    }

    #[test]
    fn a_slot_nobody_serves_is_unserved() {
        assert_eq!(owner_in(&nodes("0-6"), 7), SlotOwner::Unserved { slot: 7 });
        let fresh = "aaaa :0@0 myself,master - 0 0 0 connected\n";
        assert_eq!(owner_in(fresh, 7), SlotOwner::Unserved { slot: 7 });
    }

    #[test]
    fn a_slot_served_by_a_node_of_unknown_address_is_unserved() {
        for address in [":7002@17002", "127.0.0.1:0@0", ":0@0"] {
            let text = nodes("0-6").replace("127.0.0.1:7002@17002,,shard-id=x", address);
            let text = text.replace("5461-10922", "7 5461-10922");
            assert_eq!(
                owner_in(&text, 7),
                SlotOwner::Unserved { slot: 7 },
                "{address}"
            );
        }
    }

    #[test]
    fn a_text_without_this_node_tells_nothing() {
        let others = "bbbb 127.0.0.1:7002@17002 master - 0 1 2 connected 0-16383";
        for text in [
            "",
            "garbage",
            "aaaa 127.0.0.1:7001@17001 myself,master",
            others,
        ] {
            assert_eq!(owner_in(text, 7), SlotOwner::Unknown { slot: 7 });
        }
    }

    #[test]
    fn a_migration_to_a_node_of_unknown_address_tells_nothing() {
        let text = nodes("0-5460 [7->-ffff]");
        assert_eq!(owner_in(&text, 7), SlotOwner::Unknown { slot: 7 });
    }

    fn answer(owner: SlotOwner, all_missing: bool) -> Option<String> {
        redirect(&owner, all_missing).map(|error| error.text().to_string())
    }

    #[test]
    fn a_waiter_is_decided_where_its_slot_is_served_or_imported() {
        for all_missing in [true, false] {
            assert_eq!(answer(SlotOwner::NotCluster, all_missing), None);
            assert_eq!(answer(SlotOwner::Here { slot: 7 }, all_missing), None);
            assert_eq!(answer(SlotOwner::Importing { slot: 7 }, all_missing), None);
        }
    }

    #[test]
    fn a_waiter_whose_keys_moved_with_their_slot_is_asked_to_the_node_receiving_it() {
        let owner = SlotOwner::MigratingTo {
            slot: 7,
            to: "127.0.0.1:7002".into(),
        };
        assert_eq!(
            answer(owner.clone(), true).as_deref(),
            Some("ASK 7 127.0.0.1:7002")
        );
        assert_eq!(
            answer(owner, false).as_deref(),
            Some("TRYAGAIN Multiple keys request during rehashing of slot")
        );
    }

    #[test]
    fn a_waiter_whose_slot_is_served_elsewhere_is_moved_there() {
        let owner = SlotOwner::Elsewhere {
            slot: 7,
            node: "127.0.0.1:7002".into(),
        };
        for all_missing in [true, false] {
            assert_eq!(
                answer(owner.clone(), all_missing).as_deref(),
                Some("MOVED 7 127.0.0.1:7002")
            );
        }
    }

    #[test]
    fn a_waiter_whose_slot_nobody_serves_or_nobody_knows_is_not_decided() {
        assert_eq!(
            answer(SlotOwner::Unserved { slot: 7 }, true).as_deref(),
            Some("CLUSTERDOWN Hash slot not served")
        );
        assert!(answer(SlotOwner::Unknown { slot: 7 }, true)
            .is_some_and(|reply| reply.starts_with("TRYAGAIN ")));
    }
}
