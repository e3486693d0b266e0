//! What an answerer is: the [`Listener`] trait, the futures it returns, and [`Explained`] for a
//! closure that gives a reason.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::answer::Answer;
use crate::outcome::{Decision, Failure};

use super::Question;

/// An answer given at once ([`Listener::decide_now`]): the answering version, and the answer.
pub type ImmediateAnswer = (Option<Arc<str>>, Result<Answer, Failure>);

/// The future a listener returns.
pub type ListenerFuture = Pin<Box<dyn Future<Output = Result<Decision, Failure>> + Send>>;

/// The future of a listener that answers with a reason or a proposal ([`Listener::answer`]).
pub type AnswerFuture = Pin<Box<dyn Future<Output = Result<Answer, Failure>> + Send>>;

/// An answerer or gate. Implemented for any `Fn(Question) -> impl Future<Output =
/// Result<Decision, Failure>>`; wrap a closure answering `Result<Answer, Failure>` in
/// [`Explained`] to give a reason.
pub trait Listener: Send + Sync + 'static {
    /// Decides `question`, or says [`Decision::Next`].
    fn decide(&self, question: Question) -> ListenerFuture;

    /// Like [`Listener::decide`], also naming the version of the listener that will answer (a
    /// plugin's digest), for the audit. A listener whose version can change between calls takes
    /// its snapshot here.
    fn decide_versioned(&self, question: Question) -> (Option<Arc<str>>, ListenerFuture) {
        (None, self.decide(question))
    }

    /// Answers at once, on the asking task, when this listener can (a warm in-process plugin):
    /// the waterfall tries this first and skips the future. `None` (the default) means "ask me
    /// through [`Listener::decide_versioned`]". The answer carries the version, as there.
    fn decide_now(&self, _question: &Question) -> Option<ImmediateAnswer> {
        None
    }

    /// Answers with more than a decision (a reason, a proposed rule), when this listener can: the
    /// waterfall tries this after [`Listener::decide_now`] and before
    /// [`Listener::decide_versioned`]. `None` (the default) means "ask me for a bare decision".
    fn answer(&self, _question: &Question) -> Option<(Option<Arc<str>>, AnswerFuture)> {
        None
    }

    /// Whether this listener sends the question out of the process (to a person, an editor, a
    /// remote service). The waterfall makes the question's `approval/asked` record durable before
    /// asking such a listener, so nobody outside ever sees a question the log could lose. In-process
    /// gates (the default) decide before that sync, and the question and its decision are then
    /// made durable together.
    fn leaves_process(&self) -> bool {
        false
    }
}

impl<F, Fut> Listener for F
where
    F: Fn(Question) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Decision, Failure>> + Send + 'static,
{
    fn decide(&self, question: Question) -> ListenerFuture {
        Box::pin(self(question))
    }
}

/// A closure listener that answers with a full [`Answer`] (a reason, a proposal):
/// `Explained(|q| async { Ok(Answer::reject("not on Fridays")) })`.
pub struct Explained<F>(pub F);

impl<F, Fut> Listener for Explained<F>
where
    F: Fn(Question) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Answer, Failure>> + Send + 'static,
{
    fn decide(&self, question: Question) -> ListenerFuture {
        let future = (self.0)(question);
        Box::pin(async move { future.await.map(|a| a.decision) })
    }

    fn answer(&self, question: &Question) -> Option<(Option<Arc<str>>, AnswerFuture)> {
        Some((None, Box::pin((self.0)(question.clone()))))
    }
}
