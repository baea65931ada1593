//! Receipts as the scripts take them (docs/redis-layout.md): a leased message's receipt
//! is its lease token `~L<first>` and its index, a stored message's its storage id and
//! delivery count; reserve's reply is merged back into the ready list's order.

use bus_core::transport::{Delivery, Held, Receipt};
use bus_core::Result;
use fred::types::{Resp3Frame, Value};
use std::collections::HashMap;
use tokio_util::bytes::Bytes;

use crate::scripts;
use crate::Error;

/// The deliveries of a reserve reply in the ready list's order: the leased envelopes
/// (receipt: the lease token and the index) fill the positions that the stored messages'
/// `position, id, count, envelope` quadruples leave free.
pub(crate) fn merge(
    script: &scripts::LuaScript,
    token: Option<Bytes>,
    leased: Vec<Resp3Frame>,
    mut stored: impl ExactSizeIterator<Item = Resp3Frame>,
) -> Result<Vec<Delivery>> {
    let malformed = || Error::Protocol {
        script: script.name(),
        detail: "malformed delivery".into(),
    };
    // The token gets an allocation of its own: every receipt of the batch clones it, on
    // the I/O and the handler threads, and as a slice of fred's read buffer it would share
    // one reference count with every envelope of the reply.
    let token = token.map(|t| Bytes::copy_from_slice(&t));
    let mut out = Vec::with_capacity(leased.len() + stored.len() / 4);
    let mut leased = leased.into_iter().enumerate();
    let mut lease = |out: &mut Vec<Delivery>| -> Result<bool, Error> {
        let Some((index, envelope)) = leased.next() else {
            return Ok(false);
        };
        let (Some(token), Some(payload)) = (&token, bytes(envelope)) else {
            return Err(malformed());
        };
        out.push(Delivery {
            receipt: Receipt::leased(
                token.clone(),
                u32::try_from(index).map_err(|_| malformed())?,
            ),
            delivery_count: 1,
            payload,
            decoded: None,
        });
        Ok(true)
    };
    while let Some(position) = stored.next() {
        let (Some(position), Some(id), Some(count), Some(payload)) = (
            int(&position),
            stored.next().and_then(bytes),
            stored.next().as_ref().and_then(int),
            stored.next().and_then(bytes),
        ) else {
            return Err(malformed().into());
        };
        while (out.len() as i64) < position {
            if !lease(&mut out)? {
                return Err(malformed().into());
            }
        }
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        out.push(Delivery {
            receipt: Receipt::stored(id, count),
            delivery_count: count,
            payload,
            decoded: None,
        });
    }
    while lease(&mut out)? {}
    Ok(out)
}

/// A string of a script's reply, as fred read it.
pub(crate) fn bytes(frame: Resp3Frame) -> Option<Bytes> {
    match frame {
        Resp3Frame::BlobString { data, .. } | Resp3Frame::SimpleString { data, .. } => Some(data),
        _ => None,
    }
}

/// An integer of a script's reply, as fred read it.
pub(crate) fn int(frame: &Resp3Frame) -> Option<i64> {
    match frame {
        Resp3Frame::Number { data, .. } => Some(*data),
        _ => None,
    }
}

/// The error of a reply of another shape than `script` gives.
pub(crate) fn unexpected(script: &scripts::LuaScript, reply: Resp3Frame) -> Error {
    script.unexpected(&Value::try_from(reply).unwrap_or(Value::Null))
}

/// Receipts split for ack.lua and renew.lua: the stored ones as `id, count` pairs, the
/// leased ones grouped per lease, in first-seen order (a fetched batch is one lease, so a
/// receipt's group is almost always the last one; the map finds the others), each
/// lease's indices as ack.lua takes them: a bitmap, bit `i` (the high bit first) set for
/// index `i`.
pub(crate) struct Split<'a> {
    pub(crate) stored: Vec<&'a Receipt>,
    pub(crate) leases: Vec<(&'a Bytes, Vec<u8>)>,
}

/// Most messages one reserve leases together (common.lua's LEASE_MAX): bounds a reserve
/// and the recovery of one lease, and an index at or past it names no message (a stale
/// receipt, which ack.lua would ignore, and which would only make a bitmap long).
pub(crate) const LEASE_MAX: usize = 1_000;

impl<'a> Split<'a> {
    pub(crate) fn new(receipts: &'a [Receipt]) -> Self {
        let mut split = Split {
            stored: Vec::new(),
            leases: Vec::new(),
        };
        let mut groups: HashMap<&Bytes, usize> = HashMap::new();
        for receipt in receipts {
            let Held::Leased { lease, index } = &receipt.held else {
                split.stored.push(receipt);
                continue;
            };
            let group = match split.leases.last() {
                Some((token, _)) if *token == lease => split.leases.len() - 1,
                _ => *groups.entry(lease).or_insert_with(|| {
                    split.leases.push((lease, Vec::new()));
                    split.leases.len() - 1
                }),
            };
            if (*index as usize) < LEASE_MAX {
                set_bit(&mut split.leases[group].1, *index as usize);
            }
        }
        split
    }

    /// `s, (id, count) × s`: the stored receipts as script arguments.
    pub(crate) fn stored_args(&self, args: &mut Vec<Value>) {
        args.push(Value::from(self.stored.len() as i64));
        self.pairs(args);
    }

    /// `(id, count) × s`.
    pub(crate) fn pairs(&self, args: &mut Vec<Value>) {
        args.extend(self.stored.iter().flat_map(|r| receipt_pair(r)));
    }
}

/// `id, count` (a leased message: `token, index`), as the scripts take a receipt.
pub(crate) fn receipt_pair(receipt: &Receipt) -> [Value; 2] {
    let (key, number) = match &receipt.held {
        Held::Stored { key, delivery } => (key, delivery),
        Held::Leased { lease, index } => (lease, index),
    };
    [Value::Bytes(key.clone()), number_arg(*number)]
}

/// Sets bit `index` of a lease group's bits as ack.lua takes them (SETBIT's order: the high
/// bit of each byte first), growing them as needed.
pub(crate) fn set_bit(bits: &mut Vec<u8>, index: usize) {
    if bits.len() <= index / 8 {
        bits.resize(index / 8 + 1, 0);
    }
    bits[index / 8] |= 0x80 >> (index % 8);
}

/// A lease index or delivery count as a script argument. Below [`SMALL`], its decimal
/// text comes from a table made once, so that an argument per message (a stored receipt
/// acked, a message retried or released) costs a copy of a few bytes: fred formats an
/// integer argument itself and measures it with two `log10` calls (~500 instructions per
/// argument under callgrind).
fn number_arg(n: u32) -> Value {
    /// Every lease index (reserve leases at most 1,000 messages) and any delivery count
    /// below it.
    const SMALL: u32 = 1_000;
    static TEXT: std::sync::LazyLock<Vec<Bytes>> = std::sync::LazyLock::new(|| {
        (0..SMALL)
            .map(|n| Bytes::from_static(Box::leak(n.to_string().into_boxed_str()).as_bytes()))
            .collect()
    });
    match TEXT.get(n as usize) {
        Some(text) => Value::Bytes(text.clone()),
        None => Value::from(i64::from(n)),
    }
}

/// `id, count, id, count, ...` as script arguments (a leased message: token, index).
pub(crate) fn receipt_args(receipts: &[Receipt]) -> impl Iterator<Item = Value> + '_ {
    receipts.iter().flat_map(receipt_pair)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(text: &'static str) -> Resp3Frame {
        Resp3Frame::BlobString {
            data: Bytes::from_static(text.as_bytes()),
            attributes: None,
        }
    }

    fn number(n: i64) -> Resp3Frame {
        Resp3Frame::Number {
            data: n,
            attributes: None,
        }
    }

    fn receipt(key: &'static str, number: u32) -> Receipt {
        let key = Bytes::from_static(key.as_bytes());
        if key.starts_with(b"~L") {
            Receipt::leased(key, number)
        } else {
            Receipt::stored(key, number)
        }
    }

    #[test]
    fn a_reply_keeps_the_ready_order_of_leased_and_stored_messages() {
        let script = &scripts::RESERVE;
        let leased = vec![blob("a"), blob("b")];
        // A stored message at position 1, between the two leased ones.
        let stored = vec![number(1), blob("~7"), number(3), blob("s")];
        let out = merge(
            script,
            Some(Bytes::from_static(b"~L5")),
            leased,
            stored.into_iter(),
        )
        .unwrap();
        let seen: Vec<(&Receipt, u32, &[u8])> = out
            .iter()
            .map(|d| (&d.receipt, d.delivery_count, &d.payload[..]))
            .collect();
        assert_eq!(
            seen,
            [
                (&receipt("~L5", 0), 1, &b"a"[..]),
                (&receipt("~7", 3), 3, b"s"),
                (&receipt("~L5", 1), 1, b"b"),
            ]
        );
        // A position past the leased envelopes is a malformed reply, not a panic.
        let bad = vec![number(5), blob("~7"), number(3), blob("s")];
        assert!(merge(script, None, Vec::new(), bad.into_iter()).is_err());
    }

    #[test]
    fn receipts_are_grouped_per_lease_in_first_seen_order() {
        let receipts = [
            receipt("~L1", 0),
            receipt("~3", 2),
            receipt("~L9", 4),
            receipt("~L1", 2),
            receipt("~L9", 5),
        ];
        let split = Split::new(&receipts);
        assert_eq!(split.stored.len(), 1);
        let groups: Vec<(&[u8], &[u8])> = split
            .leases
            .iter()
            .map(|(token, bits)| (&token[..], &bits[..]))
            .collect();
        assert_eq!(
            groups,
            [(&b"~L1"[..], &[0b1010_0000][..]), (b"~L9", &[0b0000_1100])]
        );
    }

    #[test]
    fn a_lease_index_is_its_bit_the_high_bit_first() {
        let receipts = [
            receipt("~L1", 9),
            receipt("~L1", 0),
            receipt("~L1", 9),
            receipt("~L1", 999),
            receipt("~L1", 1_000),
            receipt("~L1", u32::MAX),
        ];
        let split = Split::new(&receipts);
        let bits = &split.leases[0].1;
        // 0 and 9 (acked twice, set once), 999 the last bit of byte 124; past the largest
        // lease, nothing.
        assert_eq!(bits.len(), 125);
        assert_eq!(&bits[..2], &[0b1000_0000, 0b0100_0000]);
        assert_eq!(bits[124], 0b0000_0001);
        assert_eq!(bits.iter().map(|b| b.count_ones()).sum::<u32>(), 3);
    }
}
