//! `reject-all` answerer: the unattended terminal stance. Whatever reaches it is rejected.

wit_bindgen::generate!({ path: "../../wit/approval-0.1.wit", world: "answerer" });

struct RejectAll;

impl Guest for RejectAll {
    fn decide(_request: Request) -> Decision {
        Decision::Reject
    }
}

export!(RejectAll);
