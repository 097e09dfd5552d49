import type { Command, Option } from 'commander';

/**
 * Shell completion generated from the command tree itself (so from the route table): for each
 * command path, its subcommands, its flags, which flags take a value and the choices of that value.
 * The scripts hold the tree, so a TAB does not start the CLI.
 */
interface Node {
  path: string;
  children: string[];
  flags: string[];
  valued: Map<string, string[]>;
}

function flagNames(option: Option): string[] {
  return [option.short, option.long].filter((f): f is string => Boolean(f));
}

function collect(command: Command, path: string, globals: readonly Option[], out: Node[]): void {
  const options = [...command.options, ...globals];
  const valued = new Map<string, string[]>();
  for (const option of options) {
    if (option.required || option.optional) for (const name of flagNames(option)) valued.set(name, option.argChoices ?? []);
  }
  out.push({
    path,
    // Subcommands, and the fixed values of a positional argument (`completion bash|zsh`).
    children: [...command.commands.map((c) => c.name()), ...command.registeredArguments.flatMap((a) => a.argChoices ?? [])],
    flags: [...new Set([...options.flatMap(flagNames), '--help'])],
    valued,
  });
  for (const child of command.commands) collect(child, `${path} ${child.name()}`, globals, out);
}

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

function nodesOf(program: Command): Node[] {
  const nodes: Node[] = [];
  collect(program, 'cloud', program.options, nodes);
  return nodes;
}

/** The three tables: for each command path its subcommands, its flags, and the flags that take a value (with their choices). */
function tables(nodes: Node[], shell: 'bash' | 'zsh'): string {
  const lines = [`${shell === 'bash' ? 'declare -gA' : 'typeset -gA'} _cloud_children _cloud_flags _cloud_valued`];
  for (const n of nodes) {
    if (shell === 'bash') {
      // bash: `name[key]=value`, with the key quoted as any word.
      lines.push(`_cloud_children[${quote(n.path)}]=${quote(n.children.join(' '))}`);
      lines.push(`_cloud_flags[${quote(n.path)}]=${quote(n.flags.join(' '))}`);
      for (const [flag, choices] of n.valued) lines.push(`_cloud_valued[${quote(`${n.path} ${flag}`)}]=${quote(choices.join(' ') || ' ')}`);
    } else {
      // zsh keeps quotes inside a subscript, so assign pairs instead.
      lines.push(`_cloud_children+=(${quote(n.path)} ${quote(n.children.join(' '))})`);
      lines.push(`_cloud_flags+=(${quote(n.path)} ${quote(n.flags.join(' '))})`);
      for (const [flag, choices] of n.valued) lines.push(`_cloud_valued+=(${quote(`${n.path} ${flag}`)} ${quote(choices.join(' ') || ' ')})`);
    }
  }
  return lines.join('\n');
}

export function completionScript(program: Command, shell: 'bash' | 'zsh'): string {
  const nodes = nodesOf(program);
  if (shell === 'bash') {
    return `# bash completion for cloud. Load with: source <(cloud completion bash)
${tables(nodes, 'bash')}

_cloud_complete() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" prev="\${COMP_WORDS[COMP_CWORD-1]}" cpath=cloud w i skip=0
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    if ((skip)); then skip=0; continue; fi
    if [[ $w == -* ]]; then [[ -n "\${_cloud_valued["$cpath $w"]+set}" ]] && skip=1; continue; fi
    [[ " \${_cloud_children[$cpath]} " == *" $w "* ]] && cpath="$cpath $w"
  done
  if [[ $prev == -* && -n "\${_cloud_valued["$cpath $prev"]+set}" ]]; then
    COMPREPLY=($(compgen -W "\${_cloud_valued["$cpath $prev"]}" -- "$cur"))
    return
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "\${_cloud_flags[$cpath]}" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "\${_cloud_children[$cpath]}" -- "$cur"))
  fi
}
complete -o default -F _cloud_complete cloud
`;
  }
  return `#compdef cloud
# zsh completion for cloud. Load with: source <(cloud completion zsh)   (after compinit)
${tables(nodes, 'zsh')}

_cloud() {
  local cpath=cloud w i skip=0 prev=\${words[CURRENT-1]}
  for ((i = 2; i < CURRENT; i++)); do
    w=\${words[i]}
    if ((skip)); then skip=0; continue; fi
    if [[ $w == -* ]]; then [[ -n \${_cloud_valued[$cpath $w]+set} ]] && skip=1; continue; fi
    [[ " \${_cloud_children[$cpath]} " == *" $w "* ]] && cpath="$cpath $w"
  done
  if [[ $prev == -* && -n \${_cloud_valued[$cpath $prev]+set} ]]; then
    compadd -- \${=_cloud_valued[$cpath $prev]}
    return
  fi
  if [[ \${words[CURRENT]} == -* ]]; then
    compadd -- \${=_cloud_flags[$cpath]}
  else
    compadd -- \${=_cloud_children[$cpath]}
  fi
}
compdef _cloud cloud
`;
}
