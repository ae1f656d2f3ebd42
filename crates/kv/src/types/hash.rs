//! Hashes.

use super::*;

pub(super) const SPECS: &[Spec] = &[];
