/**
 * Reading an email and a password. On a terminal the password is read in raw mode, so the terminal
 * echoes nothing; from a pipe (`--password-stdin`, scripts) the first line is read.
 */
export class PromptCancelled extends Error {
  constructor() {
    super('cancelled');
  }
}

// What arrived after the line just read: the next prompt's answer may come in the same chunk.
let pending = '';

export async function readLine(input: NodeJS.ReadStream = process.stdin): Promise<string> {
  return new Promise((resolve, reject) => {
    let data = pending;
    pending = '';
    let ended = false;
    const take = () => {
      const nl = data.indexOf('\n');
      if (nl < 0 && !ended) return false;
      const line = nl < 0 ? data : data.slice(0, nl);
      pending = nl < 0 ? '' : data.slice(nl + 1);
      input.off('data', onData);
      input.off('end', onEnd);
      input.off('error', reject);
      input.pause();
      resolve(line.replace(/\r$/, ''));
      return true;
    };
    const onData = (chunk: Buffer | string) => {
      data += chunk.toString();
      take();
    };
    const onEnd = () => {
      ended = true;
      take();
    };
    if (take()) return;
    if (input.readableEnded) return onEnd();
    input.on('data', onData);
    input.once('end', onEnd);
    input.once('error', reject);
    input.resume();
  });
}

export async function prompt(question: string, output: NodeJS.WritableStream = process.stderr, input: NodeJS.ReadStream = process.stdin): Promise<string> {
  output.write(question);
  return readLine(input);
}

/** A prompt whose answer is not echoed. Backspace edits, Ctrl-C and Ctrl-D cancel. */
export async function promptHidden(
  question: string,
  output: NodeJS.WritableStream = process.stderr,
  input: NodeJS.ReadStream = process.stdin,
): Promise<string> {
  if (!input.isTTY) {
    output.write(question);
    return readLine(input);
  }
  // Echo goes off before the prompt shows, so nothing typed after it can be echoed.
  input.setRawMode(true);
  input.setEncoding('utf8');
  input.resume();
  output.write(question);
  return new Promise((resolve, reject) => {
    let answer = '';
    const done = (err: Error | null) => {
      input.setRawMode(false);
      input.pause();
      input.off('data', onData);
      output.write('\n');
      if (err) reject(err);
      else resolve(answer);
    };
    const onData = (chunk: string) => {
      for (const ch of chunk) {
        if (ch === '\r' || ch === '\n') return done(null);
        if (ch === '\u0003' || ch === '\u0004') return done(new PromptCancelled());
        if (ch === '\u007f' || ch === '\b') answer = answer.slice(0, -1);
        else if (ch >= ' ') answer += ch;
      }
    };
    input.on('data', onData);
  });
}
