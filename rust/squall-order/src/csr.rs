//! Compressed adjacency lists.

/// Row `i` is `targets[offsets[i]..offsets[i + 1]]`.
#[derive(Clone, Debug)]
pub(crate) struct Csr {
    offsets: Vec<usize>,
    targets: Vec<u32>,
}

impl Csr {
    /// Builds from per-row target lists, in row order.
    pub(crate) fn from_rows<'a>(rows: impl ExactSizeIterator<Item = &'a [u32]>) -> Self {
        let mut offsets = Vec::with_capacity(rows.len() + 1);
        let mut targets = Vec::new();
        offsets.push(0);
        for row in rows {
            targets.extend_from_slice(row);
            offsets.push(targets.len());
        }
        Csr { offsets, targets }
    }

    /// Builds `n` rows from `(row, target)` pairs; each row keeps its pairs' order.
    pub(crate) fn from_pairs(n: usize, pairs: &[(u32, u32)]) -> Self {
        let mut offsets = vec![0usize; n + 1];
        for &(row, _) in pairs {
            offsets[row as usize + 1] += 1;
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        let mut fill = offsets.clone();
        let mut targets = vec![0u32; pairs.len()];
        for &(row, target) in pairs {
            targets[fill[row as usize]] = target;
            fill[row as usize] += 1;
        }
        Csr { offsets, targets }
    }

    /// The reversed adjacency; rows come out in ascending source order.
    pub(crate) fn transpose(&self) -> Self {
        let n = self.len();
        let mut offsets = vec![0usize; n + 1];
        for &t in &self.targets {
            offsets[t as usize + 1] += 1;
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        let mut fill = offsets.clone();
        let mut targets = vec![0u32; self.targets.len()];
        for src in 0..n {
            for &t in self.row(src as u32) {
                targets[fill[t as usize]] = src as u32;
                fill[t as usize] += 1;
            }
        }
        Csr { offsets, targets }
    }

    /// Same rows with every dead node's row emptied and dead targets dropped.
    pub(crate) fn restricted(&self, alive: &[bool]) -> Self {
        let mut offsets = Vec::with_capacity(self.offsets.len());
        let mut targets = Vec::with_capacity(self.targets.len());
        offsets.push(0);
        for i in 0..self.len() {
            if alive[i] {
                let row = self.row(i as u32);
                targets.extend(row.iter().copied().filter(|&t| alive[t as usize]));
            }
            offsets.push(targets.len());
        }
        Csr { offsets, targets }
    }

    pub(crate) fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    #[inline]
    pub(crate) fn row(&self, i: u32) -> &[u32] {
        let i = i as usize;
        &self.targets[self.offsets[i]..self.offsets[i + 1]]
    }

    #[inline]
    pub(crate) fn degree(&self, i: u32) -> usize {
        let i = i as usize;
        self.offsets[i + 1] - self.offsets[i]
    }
}
