//! Always user-as-prefix (UP): `[U][I_1..I_N][instr]`.

use super::{PrefixKind, PrefixSelector, SelectInput};

pub struct FixedUser;

impl PrefixSelector for FixedUser {
    fn name(&self) -> &'static str {
        "user_prefix"
    }

    fn choose(&self, _input: &SelectInput<'_>) -> PrefixKind {
        PrefixKind::User
    }
}
