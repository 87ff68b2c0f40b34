//! Per-interval histograms of every probe, kept compressed for interval logs.

use hdrhistogram::Histogram;

use super::Aggregator;

/// Per-interval histograms of every probe, for interval logs. Kept compressed (V2 +
/// DEFLATE, a few hundred bytes each) because a long run has many intervals; recorded
/// only when an interval log is exported.
#[derive(Debug, Clone, Default)]
pub(crate) struct IntervalLog {
    entries: Vec<IntervalEntry>,
}

#[derive(Debug, Clone)]
struct IntervalEntry {
    probe_id: u32,
    start_s: f64,
    length_s: f64,
    compressed: Vec<u8>,
}

/// One interval's histogram of one probe, decompressed.
#[derive(Debug, Clone)]
pub(crate) struct IntervalHistogram {
    pub start_s: f64,
    pub length_s: f64,
    pub handler_ns: Histogram<u64>,
}

impl IntervalLog {
    /// Closes the interval `[start_s, start_s + length_s)` of every probe in `aggregator`
    /// that had hits.
    pub(crate) fn close_interval(
        &mut self,
        aggregator: &mut Aggregator,
        start_s: f64,
        length_s: f64,
    ) {
        use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};
        let mut serializer = V2DeflateSerializer::new();
        for (probe_id, probe) in aggregator.probes_mut().iter_mut().enumerate() {
            let Some(histogram) = probe.take_interval().filter(|h| !h.is_empty()) else {
                continue;
            };
            let mut compressed = Vec::new();
            // Serializing into memory fails only on a histogram too large to encode,
            // which these bounds rule out; such an interval would be left out.
            if serializer.serialize(&histogram, &mut compressed).is_ok() {
                self.entries.push(IntervalEntry {
                    probe_id: probe_id as u32,
                    start_s,
                    length_s,
                    compressed,
                });
            }
        }
    }

    /// The intervals of one probe, oldest first.
    pub(crate) fn of_probe(&self, probe_id: u32) -> Vec<IntervalHistogram> {
        use hdrhistogram::serialization::Deserializer;
        let mut deserializer = Deserializer::new();
        self.entries
            .iter()
            .filter(|e| e.probe_id == probe_id)
            .filter_map(|e| {
                let handler_ns = deserializer
                    .deserialize(&mut std::io::Cursor::new(&e.compressed))
                    .ok()?;
                Some(IntervalHistogram {
                    start_s: e.start_s,
                    length_s: e.length_s,
                    handler_ns,
                })
            })
            .collect()
    }

    /// Bytes held, for memory accounting.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.entries.iter().map(|e| e.compressed.len()).sum()
    }
}
