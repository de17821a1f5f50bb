//! Always item-as-prefix (IP): `[I_1..I_N][U][instr]`.

use super::{PrefixKind, PrefixSelector, SelectInput};

pub struct FixedItem;

impl PrefixSelector for FixedItem {
    fn name(&self) -> &'static str {
        "item_prefix"
    }

    fn choose(&self, _input: &SelectInput<'_>) -> PrefixKind {
        PrefixKind::Item
    }
}
