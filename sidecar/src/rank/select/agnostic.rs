//! The cache-agnostic baseline: the longer side becomes the prefix (ties go to the user), as a
//! scheduler that ignores what is cached would choose to maximise the shareable part.

use super::{PrefixKind, PrefixSelector, SelectInput};

pub struct Agnostic;

impl PrefixSelector for Agnostic {
    fn name(&self) -> &'static str {
        "agnostic"
    }

    fn choose(&self, input: &SelectInput<'_>) -> PrefixKind {
        if input.user_tokens >= input.item_tokens {
            PrefixKind::User
        } else {
            PrefixKind::Item
        }
    }
}
