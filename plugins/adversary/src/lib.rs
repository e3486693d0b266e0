//! A misbehaving gate (Rust), for the conformance suite's adversarial cases. The tool name picks
//! the misbehaviour: `throw` panics, `loop` never returns, `alloc` allocates without end; any
//! other tool is granted, to show the plugin recovers.

wit_bindgen::generate!({ path: "../../wit/approval-0.1.wit", world: "answerer" });

struct Adversary;

impl Guest for Adversary {
    fn decide(request: Request) -> Decision {
        match request.tool_name.as_str() {
            "throw" => panic!("the adversary panics"),
            "loop" => loop {
                std::hint::black_box(&request);
            },
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(std::hint::black_box(vec![1u8; 1 << 20]));
                }
            }
            _ => Decision::AllowOnce,
        }
    }
}

export!(Adversary);
