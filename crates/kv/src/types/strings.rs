//! String commands beyond the store's own operations: `LCS` and the bit operations.

use super::*;

/// The string commands of this module.
pub(super) const SPECS: &[Spec] = &[];
