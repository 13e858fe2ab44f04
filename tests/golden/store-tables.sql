BEGIN TRANSACTION;
CREATE TABLE contexts (
    run_id TEXT NOT NULL, idx INTEGER NOT NULL, doc TEXT NOT NULL,
    PRIMARY KEY (run_id, idx)
) WITHOUT ROWID;
INSERT INTO "contexts" VALUES('old',0,'{"state":{},"mode_state":{"run_count":0}}');
INSERT INTO "contexts" VALUES('old',1,'{"state":{},"mode_state":{"run_count":1}}');
CREATE TABLE messages (
    run_id TEXT NOT NULL, idx INTEGER NOT NULL, doc TEXT NOT NULL,
    PRIMARY KEY (run_id, idx)
) WITHOUT ROWID;
INSERT INTO "messages" VALUES('old',0,'{"role":"user","content":"record two notes"}');
INSERT INTO "messages" VALUES('old',1,'{"role":"assistant","tool_calls":[{"call_id":"c1","name":"record","arguments":{"note":"one"}}],"metadata":{"model":"crash-model"}}');
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO "meta" VALUES('format','agentfsm/1');
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    state TEXT NOT NULL,
    segments INTEGER NOT NULL,
    steps INTEGER NOT NULL,
    summary TEXT,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    result TEXT,
    agent_state TEXT,
    owner TEXT,
    lease_until REAL
);
INSERT INTO "runs" VALUES('old','paused','paused',1,2,NULL,1.79629865258950734141e+09,1.79629865259465146057e+09,'{"type":"Paused","chain":{"llm":"crash-model","messages":[[0,2]],"needs_response":true,"context":1,"tools":["record"],"exchanged":[[1,1]],"last":1}}','{"messages":[{"role":"user","content":"record two notes"},{"role":"assistant","tool_calls":[{"call_id":"c1","name":"record","arguments":{"note":"one"}}],"metadata":{"model":"crash-model"}}],"status":"paused"}',NULL,NULL);
CREATE TABLE segments (
    run_id TEXT NOT NULL, segment INTEGER NOT NULL, header TEXT NOT NULL,
    PRIMARY KEY (run_id, segment)
) WITHOUT ROWID;
INSERT INTO "segments" VALUES('old',0,'{"format":"agentfsm/1","machine":"standard","entry":"expanding","chain":{"llm":"crash-model","messages":[[0,1]],"needs_response":true,"context":0,"tools":["record"],"last":0},"options":{"max_runs":50,"until_tool":[],"require_tool_success":false},"started":1796298652.5848527}');
CREATE TABLE transitions (
    run_id TEXT NOT NULL, segment INTEGER NOT NULL, seq INTEGER NOT NULL, doc TEXT NOT NULL,
    PRIMARY KEY (run_id, segment, seq)
);
INSERT INTO "transitions" VALUES('old',0,0,'{"source":"expanding","trigger":"expanded","dest":"calling","chain":{"llm":"crash-model","messages":[[0,1]],"needs_response":true,"context":0,"tools":["record"],"last":0},"elapsed":3.1458999728783965e-05}');
INSERT INTO "transitions" VALUES('old',0,1,'{"source":"calling","trigger":"paused","dest":"paused","chain":{"llm":"crash-model","messages":[[0,2]],"needs_response":true,"context":1,"tools":["record"],"exchanged":[[1,1]],"last":1},"elapsed":0.00013207600204623304,"detail":{"model":"crash-model","tool_calls":["record"]}}');
COMMIT;
