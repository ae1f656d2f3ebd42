//! Sets.

use super::*;

pub(super) const SPECS: &[Spec] = &[];
