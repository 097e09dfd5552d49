import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { temporal } from '@temporalio/proto';
import { Worker } from '@temporalio/worker';
import { expect, it } from 'vitest';
import { workflowBundle } from './temporal';

/**
 * Replay tests, the same for every family: the histories a test file recorded in this run, and the
 * checked-in ones under test/fixtures/<family>-histories/, must replay against the current workflow
 * code; and a tampered history must be caught (the check is real). A change that breaks the
 * checked-in histories must go behind `patched()` (docs/adding-a-family.md); re-record them with
 * RECORD_HISTORIES=1 only when old runs are allowed to break.
 *
 * Fixtures carry the history as base64 protobuf: the SDK's proto-JSON helpers fail in this install
 * ("type must be a Type", two protobufjs copies).
 */
export type History = temporal.api.history.v1.IHistory;

export interface RecordedRun {
  workflowId: string;
  workflowType: string;
  history: History;
}

export interface ReplaySuite {
  /** Folder name under test/fixtures/ (`vps-histories`). */
  fixtures: string;
  /** Names of the runs every recording must hold (one per path through the workflows). */
  expected: string[];
  /** The runs the file recorded (filled in its beforeAll or earlier tests). */
  recorded: () => Record<string, RecordedRun>;
  /** What the tamper test changes in one run: an activity's type, or (for local activities) the first marker. */
  tamper: { run: string; activity: string } | { run: string; localActivityMarker: true };
}

const fixturesDir = (name: string) => path.join(__dirname, '..', 'fixtures', name);

function readFixtures(name: string): Array<{ file: string; history: temporal.api.history.v1.History; events: number }> {
  const dir = fixturesDir(name);
  const files = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.json')) : [];
  return files.sort().map((file) => {
    const fixture = JSON.parse(readFileSync(path.join(dir, file), 'utf8'));
    return { file, events: fixture.events, history: temporal.api.history.v1.History.decode(Buffer.from(fixture.history_protobuf_base64, 'base64')) };
  });
}

function writeFixture(name: string, run: string, recorded: RecordedRun): void {
  const dir = fixturesDir(name);
  mkdirSync(dir, { recursive: true });
  const fixture = {
    name: run,
    workflow_type: recorded.workflowType,
    events: recorded.history.events?.length,
    history_protobuf_base64: Buffer.from(temporal.api.history.v1.History.encode(recorded.history).finish()).toString('base64'),
  };
  writeFileSync(path.join(dir, `${run}.json`), `${JSON.stringify(fixture, null, 1)}\n`);
}

/** The ids of the `patched()` markers a run recorded: what shows that it took a patch's new path. */
export function patchIds(history: History): string[] {
  return (history.events ?? [])
    .filter((e) => e.eventType === temporal.api.enums.v1.EventType.EVENT_TYPE_MARKER_RECORDED && e.markerRecordedEventAttributes?.markerName === 'core_patch')
    .flatMap((e) => Object.values(e.markerRecordedEventAttributes!.details ?? {}).flatMap((d) => d.payloads ?? []))
    .map((p) => (JSON.parse(Buffer.from(p.data ?? []).toString('utf8')) as { id: string }).id);
}

export function replay(history: History, workflowId: string): Promise<void> {
  return Worker.runReplayHistory({ workflowBundle: workflowBundle() }, history, workflowId);
}

/** Registers the three replay tests of a family (call inside its `describe`). */
export function replayTests(suite: ReplaySuite): void {
  it('replays the histories of this run deterministically', async () => {
    const recorded = suite.recorded();
    expect(Object.keys(recorded).sort()).toEqual([...suite.expected].sort());
    for (const [name, run] of Object.entries(recorded)) {
      await expect(replay(run.history, run.workflowId), name).resolves.toBeUndefined();
      if (process.env.RECORD_HISTORIES === '1') writeFixture(suite.fixtures, name, run);
    }
  });

  it('replays the checked-in histories deterministically', async () => {
    const fixtures = readFixtures(suite.fixtures);
    expect(fixtures.map((f) => f.file)).toEqual(suite.expected.map((name) => `${name}.json`).sort());
    for (const { file, history, events } of fixtures) {
      expect(history.events.length, file).toBe(events);
      await expect(replay(history, `fixture-${file}`), file).resolves.toBeUndefined();
    }
  });

  it('detects a history the code cannot reproduce (the check is real)', async () => {
    const run = suite.recorded()[suite.tamper.run];
    const { History } = temporal.api.history.v1;
    const tampered = History.decode(History.encode(run.history).finish());
    const tamper = suite.tamper;
    if ('activity' in tamper) {
      const scheduled = tampered.events.map((e) => e.activityTaskScheduledEventAttributes).find((a) => a?.activityType?.name === tamper.activity);
      expect(scheduled, `${tamper.activity} in ${tamper.run}`).toBeTruthy();
      scheduled!.activityType!.name = `${tamper.activity}Tampered`;
    } else {
      const marker = tampered.events.map((e) => e.markerRecordedEventAttributes).find((m) => m?.markerName);
      expect(marker, `a marker in ${tamper.run}`).toBeTruthy();
      marker!.markerName = 'tampered_marker';
    }
    await expect(replay(tampered, run.workflowId)).rejects.toThrow(/nondetermin/i);
  });
}
