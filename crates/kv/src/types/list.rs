//! Lists.

use super::*;

/// The list commands.
pub(super) const SPECS: &[Spec] = &[];
