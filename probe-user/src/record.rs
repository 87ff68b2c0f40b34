//! One ring buffer record, parsed: a leaf, read by the collector (`stream`), the
//! aggregator and the calibration runner alike.

use probe_common::{BATCH_RECORDS, HitArgsEvent, HitBatch, HitEvent};

/// One ring buffer record; the eBPF programs write two kinds, told apart by size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Record {
    Hit(HitEvent),
    HitWithArgs(HitArgsEvent),
}

impl Record {
    /// The hit, with or without its arguments.
    pub(crate) fn hit(&self) -> &HitEvent {
        match self {
            Self::Hit(hit) => hit,
            Self::HitWithArgs(event) => &event.hit,
        }
    }

    /// Hands each hit of one ring record to `on_hit`: a batch holds several. False for
    /// a record too short to be any.
    pub(crate) fn parse_each(bytes: &[u8], mut on_hit: impl FnMut(Self)) -> bool {
        if bytes.len() >= size_of::<HitBatch>() {
            // SAFETY: the slice holds a whole HitBatch, a plain-integer repr(C) type any
            // bit pattern of which is valid; read_unaligned makes no alignment demand.
            let batch = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<HitBatch>()) };
            let len = (batch.len as usize).min(BATCH_RECORDS);
            batch.records[..len]
                .iter()
                .for_each(|hit| on_hit(Self::Hit(*hit)));
            return true;
        }
        match Self::parse(bytes) {
            Some(record) => {
                on_hit(record);
                true
            }
            None => false,
        }
    }

    fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() >= size_of::<HitArgsEvent>() {
            // SAFETY: the slice holds a whole HitArgsEvent, a plain-integer repr(C) type
            // any bit pattern of which is valid; read_unaligned makes no alignment demand.
            let event = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<HitArgsEvent>()) };
            Some(Self::HitWithArgs(event))
        } else if bytes.len() >= size_of::<HitEvent>() {
            // SAFETY: as above, for a HitEvent.
            let event = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<HitEvent>()) };
            Some(Self::Hit(event))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of<T>(value: &T) -> Vec<u8> {
        // SAFETY: reading the bytes of a plain repr(C) value for a test.
        unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }
            .to_vec()
    }

    #[test]
    fn records_are_told_apart_by_size() {
        let hit = HitEvent {
            probe_id: 3,
            handler_ns: 99,
            ..Default::default()
        };
        assert_eq!(Record::parse(&bytes_of(&hit)), Some(Record::Hit(hit)));
        let with_args = HitArgsEvent {
            hit,
            count: 2,
            faulted: 0,
            args: [7, u64::MAX, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        };
        assert_eq!(
            Record::parse(&bytes_of(&with_args)),
            Some(Record::HitWithArgs(with_args))
        );
        assert_eq!(Record::parse(&[0u8; 31]), None);
    }

    #[test]
    fn a_batch_yields_its_staged_hits_only() {
        let mut batch = HitBatch {
            len: 3,
            ..Default::default()
        };
        for (i, record) in batch.records.iter_mut().enumerate() {
            record.probe_id = i as u32;
        }
        let mut ids = Vec::new();
        assert!(Record::parse_each(&bytes_of(&batch), |r| match r {
            Record::Hit(hit) => ids.push(hit.probe_id),
            Record::HitWithArgs(_) => panic!("a batch holds plain hits"),
        }));
        assert_eq!(ids, [0, 1, 2]);
        // A length past the array (never written) stops at the array.
        batch.len = 1000;
        let mut seen = 0;
        assert!(Record::parse_each(&bytes_of(&batch), |_| seen += 1));
        assert_eq!(seen, BATCH_RECORDS);
        assert!(!Record::parse_each(&[0u8; 31], |_| ()));
    }
}
