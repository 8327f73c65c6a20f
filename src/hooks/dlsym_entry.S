/* Route (a), entry: the dlsym that programs call while libuvmpool.so is preloaded.
 * Lookups with RTLD_DEFAULT or RTLD_NEXT depend on who is asking: glibc reads the return address to
 * find the caller's scope. Those are passed on with a jump, not a call, so glibc still sees the
 * program's return address and answers exactly as without uvmpool. Lookups in a given handle do not
 * depend on the caller and go to uvmpool_dlsym_in_handle (dlsym_hook.cpp). x86-64 only. */
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    .cfi_startproc
    test %rdi, %rdi                   /* RTLD_DEFAULT */
    je 1f
    cmp $-1, %rdi                     /* RTLD_NEXT */
    je 1f
    jmp uvmpool_dlsym_in_handle
1:
    mov uvmpool_glibc_dlsym(%rip), %rax
    test %rax, %rax
    je 2f
    jmp *%rax
2:
    jmp uvmpool_dlsym_unprepared      /* glibc's dlsym not yet known: only before our constructor */
    .cfi_endproc
    .size dlsym, .-dlsym

    .section .note.GNU-stack,"",@progbits
