--------------------------- MODULE replenish_order ---------------------------
(* The Stock Replenisher places an order (dst/agents/replenisher): the SKU's  *)
(* entity starts replenishments, each places its purchase order (PO) with the *)
(* supplier in a durable step that retries when no reply comes back.          *)
(* Reading guide: `==` defines a name; `/\` is "and", `\/` is "or"; x' is x   *)
(* after the step; [f EXCEPT ![r] = v] is f with entry r changed to v;        *)
(* [po |-> r, key |-> k] is a record; UNCHANGED x says x stays put.           *)
EXTENDS Naturals, FiniteSets

CONSTANTS
    StableKey,    \* TRUE: every attempt carries the PO number as idempotency key;
                  \* FALSE: a new key per attempt
    CountActive,  \* TRUE: the stock check knows a replenishment is running
    Crash,        \* TRUE: the worker may crash once; unlogged steps run again
    MaxAttempts   \* attempts of one place_order step before it gives up

Reps == {1, 2}   \* two stock checks see low stock; replenishment r orders PO r

VARIABLES
    active,    \* durable: replenishments the entity has started and not joined
    started,   \* durable: how many the entity has started
    logged,    \* durable: logged[r] says r's place_order step has its output logged
    attempt,   \* memory: attempts of r's step so far in this life of the worker
    waiting,   \* memory: r has sent an attempt and waits for its reply
    net,       \* requests on their way to the supplier
    replies,   \* replenishments whose reply is on its way back
    orders,    \* the supplier's orders: [po, key] records
    crashed    \* the one crash has happened
vars == <<active, started, logged, attempt, waiting, net, replies, orders, crashed>>

Requests == [po : Reps, key : Reps \X (0 .. MaxAttempts)]   \* all there can be
Key(r) == IF StableKey THEN <<r, 0>> ELSE <<r, attempt[r] + 1>>

Init == /\ active = {} /\ started = 0 /\ orders = {}
        /\ logged = [r \in Reps |-> FALSE]
        /\ attempt = [r \in Reps |-> 0]
        /\ waiting = [r \in Reps |-> FALSE]
        /\ net = {} /\ replies = {} /\ crashed = FALSE

\* A stock check sees low stock and starts the next replenishment, unless it
\* knows one is running.
StockCheck == /\ started < 2 /\ (CountActive => active = {})
              /\ started' = started + 1 /\ active' = active \cup {started + 1}
              /\ UNCHANGED <<logged, attempt, waiting, net, replies, orders, crashed>>

\* An attempt of place_order: the request leaves with this attempt's key.
Send(r) == /\ r \in active /\ ~logged[r] /\ ~waiting[r] /\ attempt[r] < MaxAttempts
           /\ net' = net \cup {[po |-> r, key |-> Key(r)]}
           /\ attempt' = [attempt EXCEPT ![r] = @ + 1]
           /\ waiting' = [waiting EXCEPT ![r] = TRUE]
           /\ UNCHANGED <<active, started, logged, replies, orders, crashed>>

\* The supplier takes a request: a key it has seen gets the order it holds,
\* a new key makes a new order.  With lost = TRUE the order is taken but
\* its reply never comes back.
Supplier(m, lost) ==
    /\ m \in net /\ net' = net \ {m}
    /\ orders' = IF \E o \in orders : o.key = m.key THEN orders ELSE orders \cup {m}
    /\ replies' = IF lost THEN replies ELSE replies \cup {m.po}
    /\ UNCHANGED <<active, started, logged, attempt, waiting, crashed>>

\* The reply arrives: the step's output is logged and the order is placed.
Reply(r) == /\ r \in replies /\ waiting[r]
            /\ replies' = replies \ {r}
            /\ logged' = [logged EXCEPT ![r] = TRUE]
            /\ waiting' = [waiting EXCEPT ![r] = FALSE]
            /\ UNCHANGED <<active, started, attempt, net, orders, crashed>>

\* No reply in time: the next attempt may go (the request, or its reply, may
\* still be on its way).
Timeout(r) == /\ waiting[r]
              /\ waiting' = [waiting EXCEPT ![r] = FALSE]
              /\ UNCHANGED <<active, started, logged, attempt, net, replies, orders, crashed>>

\* The replenishment ends (ordered, or given up) and the entity joins it.
Finish(r) == /\ r \in active /\ ~waiting[r] /\ (logged[r] \/ attempt[r] = MaxAttempts)
             /\ active' = active \ {r}
             /\ UNCHANGED <<started, logged, attempt, waiting, net, replies, orders, crashed>>

\* The worker crashes once: memory is lost; the log, the network and the
\* supplier are not.  Each unlogged step runs again from its first attempt.
CrashWorker == /\ Crash /\ ~crashed /\ crashed' = TRUE
               /\ attempt' = [r \in Reps |-> 0] /\ waiting' = [r \in Reps |-> FALSE]
               /\ UNCHANGED <<active, started, logged, net, replies, orders>>

Next == \/ StockCheck \/ CrashWorker \/ \E m \in Requests, lost \in BOOLEAN : Supplier(m, lost)
        \/ \E r \in Reps : Send(r) \/ Reply(r) \/ Timeout(r) \/ Finish(r)
Spec == Init /\ [][Next]_vars

\* At most one order per PO at the supplier.
OneOrderPerPO == \A r \in Reps : Cardinality({o \in orders : o.po = r}) <= 1
\* The entity's rule: at most one replenishment of the SKU runs at a time.
OneActivePerSku == Cardinality(active) <= 1
=============================================================================
