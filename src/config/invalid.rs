//! A configuration that cannot be used: every reason why, said on one
//! line. `webhookd` exits 2 on it ([`crate::cli::exit_code`]).

use std::fmt;

/// Every problem found, each a sentence that names the setting (its
/// variable, or its key in the file) and never quotes its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    problems: Vec<String>,
}

impl Invalid {
    /// `problems`, none of them empty; at least one.
    pub fn new(problems: Vec<String>) -> Self {
        debug_assert!(!problems.is_empty(), "an invalid configuration says why");
        Invalid { problems }
    }

    pub fn one(problem: impl Into<String>) -> Self {
        Invalid::new(vec![problem.into()])
    }

    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// The problems `error` stands for: an [`Invalid`]'s own (wherever it
    /// is in the chain of causes), else the error's whole chain on one line.
    pub fn problems_of(error: &anyhow::Error) -> Vec<String> {
        match error
            .chain()
            .find_map(|cause| cause.downcast_ref::<Invalid>())
        {
            Some(invalid) => invalid.problems.clone(),
            None => vec![format!("{error:#}")],
        }
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid configuration: {}", self.problems.join("; "))
    }
}

impl std::error::Error for Invalid {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_on_one_line_and_found_under_context() {
        let invalid = Invalid::new(vec!["A is unset".into(), "B is too short".into()]);
        assert_eq!(
            invalid.to_string(),
            "invalid configuration: A is unset; B is too short"
        );
        let error = anyhow::Error::new(invalid.clone()).context("serve");
        assert_eq!(Invalid::problems_of(&error), invalid.problems());
        let other = anyhow::anyhow!("cause").context("effect");
        assert_eq!(Invalid::problems_of(&other), ["effect: cause"]);
    }
}
