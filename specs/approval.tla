------------------------------ MODULE approval ------------------------------
(* Two turns race to resume one approval (dst/runtime/approvals.py).         *)
(* Reading guide: `==` defines a name; `/\` is "and", `\/` is "or"; a name    *)
(* with a prime (log') is its value after the step; [f EXCEPT ![t] = v] is    *)
(* the function f with entry t changed to v; UNCHANGED x says x stays put.    *)
(* An action is a formula over the values before and after one step: it can   *)
(* happen only in a state where its unprimed conditions hold.                 *)
EXTENDS Naturals

CONSTANTS
    SpendMode,   \* "after": spend after the effect; "before": a separate write
                 \* before it; "cas": the check itself spends (compare-and-set)
    FreshView,   \* TRUE: the check re-reads the durable record
    Serialize,   \* TRUE: one turn at a time, from its restore to its end
    Crash        \* TRUE: the agent may crash once; its unfinished turns start over

Turns == {"t1", "t2"}   \* a click and a typed "go ahead"

VARIABLES
    pc,       \* pc[t]: where turn t is in its plan (see the stages below)
    log,      \* the durable approval record: "unspent" or "spent"
    view,     \* view[t]: the record as turn t saw it when it restored
    eff,      \* how many times the action ran in the world
    crashed   \* the one crash has happened
vars == <<pc, log, view, eff, crashed>>

(* The stages of a turn, in the order its spend mode runs them:              *)
(*   after:  idle -> ready -> claimed -> acted -> spent -> done               *)
(*   before: idle -> ready -> claimed -> armed -> acted -> done               *)
(*   cas:    idle -> ready -> claimed -> acted -> done (the claim spends)     *)
(* A turn that finds the approval spent goes from ready to done.              *)
EffectFrom == IF SpendMode = "before" THEN "armed" ELSE "claimed"
SpendFrom == IF SpendMode = "after" THEN "acted" ELSE "claimed"
SpendTo == IF SpendMode = "after" THEN "spent" ELSE "armed"
RecordFrom == IF SpendMode = "after" THEN "spent" ELSE "acted"

\* What the check looks at: the live record, or the view taken at restore.
Sees(t) == IF FreshView \/ SpendMode = "cas" THEN log ELSE view[t]
\* With Serialize a turn starts (restores) only while every other turn is idle
\* or done, as the runtime's gate holds a whole turn.  (Holding only the check
\* lets a turn restore while another runs, and check that view later.)
MayRestore(t) == ~Serialize \/ \A u \in Turns \ {t} : pc[u] \in {"idle", "done"}

Init == /\ pc = [t \in Turns |-> "idle"]
        /\ log = "unspent"
        /\ view = [t \in Turns |-> "none"]
        /\ eff = 0
        /\ crashed = FALSE

\* The turn scans the history: its view is the record as it is now.
Restore(t) == /\ pc[t] = "idle" /\ MayRestore(t)
              /\ pc' = [pc EXCEPT ![t] = "ready"]
              /\ view' = [view EXCEPT ![t] = log]
              /\ UNCHANGED <<log, eff, crashed>>

\* It sees the approval unspent and claims it (with "cas", spending it too).
Check(t) == /\ pc[t] = "ready" /\ Sees(t) = "unspent"
            /\ pc' = [pc EXCEPT ![t] = "claimed"]
            /\ log' = IF SpendMode = "cas" THEN "spent" ELSE log
            /\ UNCHANGED <<view, eff, crashed>>

\* It sees the approval spent and tells the user it was already used.
Refuse(t) == /\ pc[t] = "ready" /\ Sees(t) = "spent"
             /\ pc' = [pc EXCEPT ![t] = "done"]
             /\ UNCHANGED <<log, view, eff, crashed>>

\* The receipt, written as its own step (not in "cas" mode).
Spend(t) == /\ SpendMode # "cas" /\ pc[t] = SpendFrom
            /\ pc' = [pc EXCEPT ![t] = SpendTo]
            /\ log' = "spent"
            /\ UNCHANGED <<view, eff, crashed>>

\* The tool call: one more effect in the world.
Effect(t) == /\ pc[t] = EffectFrom
             /\ pc' = [pc EXCEPT ![t] = "acted"]
             /\ eff' = eff + 1
             /\ UNCHANGED <<log, view, crashed>>

\* The outcome goes into the history; the turn is no longer busy.
Record(t) == /\ pc[t] = RecordFrom
             /\ pc' = [pc EXCEPT ![t] = "done"]
             /\ UNCHANGED <<log, view, eff, crashed>>

\* The agent crashes once: memory is lost, the record and the effects stay,
\* and every unfinished turn is delivered again and starts over from restore.
CrashAgent == /\ Crash /\ ~crashed
              /\ pc' = [t \in Turns |-> IF pc[t] = "done" THEN "done" ELSE "idle"]
              /\ crashed' = TRUE
              /\ UNCHANGED <<log, view, eff>>

Next == \/ CrashAgent
        \/ \E t \in Turns : Restore(t) \/ Check(t) \/ Refuse(t) \/ Spend(t)
                            \/ Effect(t) \/ Record(t)
Spec == Init /\ [][Next]_vars

\* The two properties, checked in every reachable state.
AtMostOnce == eff <= 1                             \* a "yes" is used once
NoResurrection == eff >= 1 => log = "spent"        \* it ran, so the record says so
=============================================================================
