//! `PerLayer<T>`: one value per runtime layer, indexed by the layer itself, so no per-layer
//! figure is read or written through a hand-computed index.

use std::ops::{Index, IndexMut};

use strata_core::RuntimeLayer;

/// One `T` for each of the four runtime layers (3-6), indexed by [`RuntimeLayer`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PerLayer<T>([T; 4]);

impl<T> PerLayer<T> {
    /// A value per layer, each made by `f` from its layer.
    pub(crate) fn from_fn(mut f: impl FnMut(RuntimeLayer) -> T) -> PerLayer<T> {
        PerLayer(RuntimeLayer::ALL.map(&mut f))
    }

    /// The layers with their values, in authority order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (RuntimeLayer, &T)> {
        RuntimeLayer::ALL.into_iter().zip(self.0.iter())
    }

    /// The values, in authority order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.0.iter()
    }
}

impl<T: Copy> PerLayer<T> {
    /// The same value for every layer.
    pub(crate) const fn splat(v: T) -> PerLayer<T> {
        PerLayer([v; 4])
    }
}

impl<T> Index<RuntimeLayer> for PerLayer<T> {
    type Output = T;
    fn index(&self, l: RuntimeLayer) -> &T {
        &self.0[l.index()]
    }
}

impl<T> IndexMut<RuntimeLayer> for PerLayer<T> {
    fn index_mut(&mut self, l: RuntimeLayer) -> &mut T {
        &mut self.0[l.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_layer_has_its_own_value() {
        let mut p = PerLayer::splat(0u64);
        for (n, l) in RuntimeLayer::ALL.into_iter().enumerate() {
            p[l] += n as u64 + 1;
        }
        let got: Vec<(u8, u64)> = p.iter().map(|(l, v)| (l.number(), *v)).collect();
        assert_eq!(got, vec![(3, 1), (4, 2), (5, 3), (6, 4)]);
        assert_eq!(
            PerLayer::from_fn(RuntimeLayer::number),
            PerLayer([3, 4, 5, 6])
        );
    }
}
